/// The parser's view of one declared option, flag or argument.
class ArgumentSlot {
    enum Kind { case option, flag, positional }
    let kind: Kind
    var names: [String]
    let help: String
    let valueName: String
    let isRequired: Bool
    let isRepeating: Bool
    let defaultDescription: String?
    var wasSet = false

    init(
        kind: Kind, names: [String], help: String, valueName: String, isRequired: Bool, isRepeating: Bool,
        defaultDescription: String?
    ) {
        self.kind = kind
        self.names = names
        self.help = help
        self.valueName = valueName
        self.isRequired = isRequired
        self.isRepeating = isRepeating
        self.defaultDescription = defaultDescription
    }

    /// Stores a value read from the command line; false when it does not parse.
    func accept(_ text: String) -> Bool { false }
    func acceptFlag() {}
}

final class ValueSlot<Value>: ArgumentSlot {
    var value: Value?
    let parse: (String) -> Value?
    let append: ((Value?, String) -> Value?)?

    init(
        kind: Kind, names: [String], help: String, valueName: String, initial: Value?, isRepeating: Bool = false,
        parse: @escaping (String) -> Value?, append: ((Value?, String) -> Value?)? = nil
    ) {
        self.value = initial
        self.parse = parse
        self.append = append
        super.init(
            kind: kind, names: names, help: help, valueName: valueName, isRequired: initial == nil && !isRepeating,
            isRepeating: isRepeating, defaultDescription: initial.flatMap { Self.describe($0) })
    }

    private static func describe(_ value: Value) -> String? {
        if let optional = value as? any OptionalMarker {
            return optional.isNone ? nil : "\(optional.unwrappedDescription)"
        }
        if let array = value as? [Any], array.isEmpty { return nil }
        if let bool = value as? Bool { return bool ? "true" : nil }
        return "\(value)"
    }

    override func accept(_ text: String) -> Bool {
        if let append {
            guard let next = append(wasSet ? value : nil, text) else { return false }
            value = next
        } else {
            guard let parsed = parse(text) else { return false }
            value = parsed
        }
        wasSet = true
        return true
    }
}

final class FlagSlot: ArgumentSlot {
    var value = false
    init(names: [String], help: String) {
        super.init(
            kind: .flag, names: names, help: help, valueName: "", isRequired: false, isRepeating: false,
            defaultDescription: nil)
    }
    override func acceptFlag() {
        value = true
        wasSet = true
    }
}

protocol OptionalMarker {
    var isNone: Bool { get }
    var unwrappedDescription: String { get }
}
extension Optional: OptionalMarker {
    var isNone: Bool { self == nil }
    var unwrappedDescription: String { self.map { "\($0)" } ?? "" }
}

/// Something the parser finds by reflection on a command struct.
protocol DeclaredArgument {
    var slot: ArgumentSlot { get }
}

/// The names an option answers to: `name` may list several, comma-separated (`"-o,--output"`).
func optionNames(_ name: String?) -> [String] {
    name.map { $0.split(separator: ",").map(String.init) } ?? []
}

/// `--name <value>`. The property name gives the flag name (`regionsFile` → `--regions-file`)
/// unless `name` is set (`"-o,--output"` for a short and a long name).
@propertyWrapper
public struct Option<Value>: DeclaredArgument {
    let valueSlot: ValueSlot<Value>
    var slot: ArgumentSlot { valueSlot }

    public var wrappedValue: Value {
        get { valueSlot.value! }
        set { valueSlot.value = newValue }
    }

    /// An option with a default.
    public init(wrappedValue: Value, name: String? = nil, help: String, valueName: String? = nil)
    where Value: ExpressibleByArgument {
        valueSlot = ValueSlot(
            kind: .option, names: optionNames(name), help: help, valueName: valueName ?? Value.defaultValueName,
            initial: wrappedValue, parse: Value.init(argument:))
    }

    /// A required option.
    public init(name: String? = nil, help: String, valueName: String? = nil) where Value: ExpressibleByArgument {
        valueSlot = ValueSlot(
            kind: .option, names: optionNames(name), help: help, valueName: valueName ?? Value.defaultValueName,
            initial: nil, parse: Value.init(argument:))
    }

    /// An optional option (nil when absent).
    public init<Wrapped: ExpressibleByArgument>(name: String? = nil, help: String, valueName: String? = nil)
    where Value == Wrapped? {
        valueSlot = ValueSlot(
            kind: .option, names: optionNames(name), help: help, valueName: valueName ?? Wrapped.defaultValueName,
            initial: .some(nil), parse: { Wrapped(argument: $0).map { .some($0) } })
    }

    /// A repeatable option collecting every value (`--set a=1 --set b=2`).
    public init<Element: ExpressibleByArgument>(
        wrappedValue: Value = [], name: String? = nil, help: String, valueName: String? = nil
    ) where Value == [Element] {
        valueSlot = ValueSlot(
            kind: .option, names: optionNames(name), help: help, valueName: valueName ?? Element.defaultValueName,
            initial: wrappedValue, isRepeating: true, parse: { Element(argument: $0).map { [$0] } },
            append: { current, text in Element(argument: text).map { (current ?? []) + [$0] } })
    }
}

/// `--name` with no value: true when present.
@propertyWrapper
public struct Flag: DeclaredArgument {
    let flagSlot: FlagSlot
    var slot: ArgumentSlot { flagSlot }

    public var wrappedValue: Bool {
        get { flagSlot.value }
        set { flagSlot.value = newValue }
    }

    public init(name: String? = nil, help: String) {
        flagSlot = FlagSlot(names: name.map { [$0] } ?? [], help: help)
    }
}

/// A positional argument.
@propertyWrapper
public struct Argument<Value>: DeclaredArgument {
    let valueSlot: ValueSlot<Value>
    var slot: ArgumentSlot { valueSlot }

    public var wrappedValue: Value {
        get { valueSlot.value! }
        set { valueSlot.value = newValue }
    }

    public init(help: String, valueName: String? = nil) where Value: ExpressibleByArgument {
        valueSlot = ValueSlot(
            kind: .positional, names: [], help: help, valueName: valueName ?? Value.defaultValueName, initial: nil,
            parse: Value.init(argument:))
    }

    public init(wrappedValue: Value, help: String, valueName: String? = nil) where Value: ExpressibleByArgument {
        valueSlot = ValueSlot(
            kind: .positional, names: [], help: help, valueName: valueName ?? Value.defaultValueName,
            initial: wrappedValue, parse: Value.init(argument:))
    }

    public init<Wrapped: ExpressibleByArgument>(help: String, valueName: String? = nil) where Value == Wrapped? {
        valueSlot = ValueSlot(
            kind: .positional, names: [], help: help, valueName: valueName ?? Wrapped.defaultValueName,
            initial: .some(nil), parse: { Wrapped(argument: $0).map { .some($0) } })
    }

    /// Every remaining positional value (`[<hex> ...]`); empty when none is given.
    public init<Element: ExpressibleByArgument>(wrappedValue: Value = [], help: String, valueName: String? = nil)
    where Value == [Element] {
        valueSlot = ValueSlot(
            kind: .positional, names: [], help: help, valueName: valueName ?? Element.defaultValueName,
            initial: wrappedValue, isRepeating: true, parse: { Element(argument: $0).map { [$0] } },
            append: { current, text in Element(argument: text).map { (current ?? []) + [$0] } })
    }
}
