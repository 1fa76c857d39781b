/// One step of a schema's history. Migrations run in order, each in its own transaction, and
/// `PRAGMA user_version` records the last one applied: a database is never migrated twice,
/// and a failed step leaves it at the previous version.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let apply: @Sendable (Database) throws -> Void

    /// A migration given as SQL (several statements allowed).
    public init(_ version: Int, _ name: String, sql: String) {
        self.version = version
        self.name = name
        self.apply = { database in try database.execute(sql) }
    }

    /// A migration that needs code (e.g. rewriting rows).
    public init(_ version: Int, _ name: String, apply: @escaping @Sendable (Database) throws -> Void) {
        self.version = version
        self.name = name
        self.apply = apply
    }
}
