import Foundation
import PerimeterStore

/// Writes batches to a SQLite file, each batch in one transaction that also bumps a counter,
/// so that a test can kill the process at any moment and check the invariant
/// `counter.total == count(items)` on the file that is left.
///
/// `store-crash --path FILE [--rows N] [--hold-after K]`: with `--hold-after`, after K commits
/// it opens one more transaction, writes into it, prints "holding" and waits to be killed.
enum StoreCrash {
    static let migrations = [
        Migration(
            1, "items and counter",
            sql: """
                CREATE TABLE items(id INTEGER PRIMARY KEY, batch INTEGER NOT NULL, payload TEXT NOT NULL);
                CREATE TABLE counter(id INTEGER PRIMARY KEY CHECK (id = 1), total INTEGER NOT NULL, batches INTEGER NOT NULL);
                INSERT INTO counter VALUES (1, 0, 0);
                """)
    ]

    static func run() throws {
        guard let path = argument("--path") else { fail("usage: store-crash --path FILE [--rows N] [--hold-after K]") }
        let rows = argument("--rows").flatMap(Int.init) ?? 200
        let holdAfter = argument("--hold-after").flatMap(Int.init)
        let database = try Database(path: path)
        try database.migrate(migrations)
        var batch = try database.scalar("SELECT batches FROM counter")?.int ?? 0
        var committed = 0
        let payload = String(repeating: "x", count: 300)
        while true {
            batch += 1
            let holding = holdAfter == committed
            try database.transaction {
                for row in 0..<rows {
                    try database.run("INSERT INTO items(batch, payload) VALUES (?, ?)", batch, "\(payload)\(row)")
                }
                try database.run("UPDATE counter SET total = total + ?, batches = batches + 1", rows)
                if holding {
                    say("holding")
                    while true { sleep(60) }
                }
            }
            committed += 1
            say("committed \(batch)")
        }
    }
}
