import Foundation

/// CPU time a process has used, from `/proc/{pid}/stat` (Linux): what the benches and the idle
/// tests measure, since unlike wall-clock rates it does not depend on what else the machine runs.
public enum ProcessCPU {
    public struct Unreadable: Error, CustomStringConvertible {
        public let description: String
    }

    /// User plus system seconds of process `pid` (nil: this one).
    public static func seconds(of pid: Int32?) throws -> Double {
        let path = "/proc/\(pid.map(String.init) ?? "self")/stat"
        let stat = try String(contentsOfFile: path, encoding: .utf8)
        // The command name (field 2) is in parentheses and may hold spaces: count from after it.
        guard let close = stat.lastIndex(of: ")") else { throw Unreadable(description: "unreadable \(path)") }
        // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
            throw Unreadable(description: "unreadable \(path): \(stat)")
        }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
