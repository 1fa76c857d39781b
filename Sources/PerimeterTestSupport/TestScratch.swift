import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where tests put their files: one directory per test process, removed when the process exits.
///
/// Each test names its own directory or file under ``root`` (with a UUID, so tests running in
/// parallel never meet). Tests end in many ways (a thrown error, a failed expectation, a kill
/// of a child); removing the whole root at exit cleans up after all of them, where one
/// `removeItem` per test was forgotten often enough that every full run left about 90
/// directories in `/tmp`. A run that was itself killed leaves its root behind: the next run
/// removes the roots of processes that no longer exist.
public enum TestScratch {
    /// `$TMPDIR/perimeter-tests-<pid>`, created on first use.
    public static var root: URL { made }

    private static let prefix = "perimeter-tests-"

    private static let made: URL = {
        let temporary = FileManager.default.temporaryDirectory
        removeAbandoned(in: temporary)
        let url = temporary.appendingPathComponent("\(prefix)\(getpid())")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        atexit {
            let url = FileManager.default.temporaryDirectory.appendingPathComponent(
                "perimeter-tests-\(getpid())")
            try? FileManager.default.removeItem(at: url)
        }
        return url
    }()

    /// Removes `perimeter-tests-<pid>` directories whose process is gone.
    private static func removeAbandoned(in temporary: URL) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []
        for name in names where name.hasPrefix(prefix) {
            guard let pid = pid_t(name.dropFirst(prefix.count)), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                try? FileManager.default.removeItem(at: temporary.appendingPathComponent(name))
            }
        }
    }
}
