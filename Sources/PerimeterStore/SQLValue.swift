/// A value SQLite stores: what statements bind and rows return.
public enum SQLValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let value): "\(value)"
        case .real(let value): "\(value)"
        case .text(let value): "'\(value)'"
        case .blob(let value): "blob(\(value.count) bytes)"
        }
    }

    public var int: Int? {
        switch self {
        case .integer(let value): Int(value)
        case .real(let value) where value.rounded() == value: Int(value)
        default: nil
        }
    }
    public var double: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .real(let value): value
        default: nil
        }
    }
    public var string: String? {
        if case .text(let value) = self { return value }
        return nil
    }
    public var bytes: [UInt8]? {
        switch self {
        case .blob(let value): value
        case .text(let value): Array(value.utf8)
        default: nil
        }
    }
    public var isNull: Bool { self == .null }
}

/// Values that bind to a statement parameter.
public protocol SQLBindable: Sendable {
    var sqlValue: SQLValue { get }
}

extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Int: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .integer(self) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .real(self) } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .integer(self ? 1 : 0) } }
extension Array: SQLBindable where Element == UInt8 { public var sqlValue: SQLValue { .blob(self) } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// One result row: values by column index or name.
public struct Row: Sendable, Hashable {
    public let columns: [String]
    public let values: [SQLValue]

    public subscript(index: Int) -> SQLValue { values[index] }

    /// The value of the column named `name`, `.null` when there is no such column.
    public subscript(name: String) -> SQLValue {
        columns.firstIndex(of: name).map { values[$0] } ?? .null
    }
}
