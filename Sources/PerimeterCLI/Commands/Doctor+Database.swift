import Foundation
import PerimeterStore

extension DoctorCommand {
    /// A service's SQLite file, read-only: it exists, is a database, and this user may write it
    /// and its directory (the service needs both for its WAL). Nothing is created: a `mode=ro`
    /// connection to a WAL database whose `-wal` and `-shm` are gone (after a clean stop) would
    /// create them, so such a file is opened `immutable` (nothing else writes it then).
    /// - Parameter creator: who makes the file at first start ("the evaluator").
    static func checkDatabase(_ path: String, _ scope: Scope, creator: String) {
        let files = FileManager.default
        let directory =
            (path as NSString).deletingLastPathComponent.isEmpty
            ? "." : (path as NSString).deletingLastPathComponent
        guard files.fileExists(atPath: path) else {
            var isDirectory: ObjCBool = false
            if !files.fileExists(atPath: directory, isDirectory: &isDirectory) || !isDirectory.boolValue {
                scope.fail(
                    "database \(path): missing, and so is its directory \(directory); create it for \(creator)'s user")
            } else if access(directory, W_OK) != 0 {
                scope.fail(
                    "database \(path): missing, and \(directory) is not writable by this user; \(creator) creates it at its first start (check the directory's owner)"
                )
            } else {
                scope.warn(
                    "database \(path): missing; \(creator) creates it at its first start (\(directory) is writable by this user; a service running as another user needs it too)"
                )
            }
            return
        }
        let walPresent = files.fileExists(atPath: path + "-wal") && files.fileExists(atPath: path + "-shm")
        var options = Database.Options()
        options.readOnly = true
        do {
            let database = try Database(path: uri(path, immutable: !walPresent), options: options)
            let version = try database.scalar("PRAGMA user_version")?.int ?? 0
            let tables = try database.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table'")?.int ?? 0
            let writable = access(path, W_OK) == 0 && access(directory, W_OK) == 0
            let text = "database \(path): readable (schema version \(version), \(tables) tables)"
            if writable {
                scope.ok(text + ", writable by this user")
            } else {
                scope.warn(
                    text
                        + "; not writable by this user (\(access(path, W_OK) == 0 ? directory : path)): fine if \(creator) runs as another user that may write it"
                )
            }
        } catch {
            scope.fail("database \(path): \(error); check the file's owner and free space")
        }
    }

    /// `file:` URI for a path, read-only (percent-encoding what a URI would misread).
    static func uri(_ path: String, immutable: Bool) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "?#%")
        let encoded = path.addingPercentEncoding(withAllowedCharacters: allowed) ?? path
        return "file:\(encoded)?mode=ro" + (immutable ? "&immutable=1" : "")
    }
}
