/// A value kept on the heap behind one pointer: for a large part of a per-subject structure that
/// is usually absent (a membership's pending change, a visit's next cluster). An absent
/// `OutOfLine<T>?` costs 8 bytes inline instead of `T`'s full size in every subject's entry
/// (and in every empty bucket of the dictionary that holds them). Value semantics: a change
/// makes a new box. `Codable` as `T` itself, so stored forms do not change.
enum OutOfLine<Value> {
    indirect case value(Value)

    init(_ value: Value) { self = .value(value) }

    var value: Value {
        switch self {
        case .value(let value): value
        }
    }
}

extension OutOfLine: Sendable where Value: Sendable {}
extension OutOfLine: Equatable where Value: Equatable {}
extension OutOfLine: Hashable where Value: Hashable {}

extension OutOfLine: Codable where Value: Codable {
    init(from decoder: any Decoder) throws { self.init(try Value(from: decoder)) }
    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}
