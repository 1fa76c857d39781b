/// A command or subcommand of `perimeter`, in swift-argument-parser's shape: a struct whose
/// `@Option`, `@Flag` and `@Argument` properties are filled from the command line, then
/// `validate()`, then `run()`.
public protocol ParsableCommand: SendableMetatype {
    static var configuration: CommandConfiguration { get }
    init()
    /// Checks the parsed values together; throw ``ValidationError`` for a usage mistake (exit 64).
    mutating func validate() throws
    /// Does the work. Throw ``ExitCode`` to choose the exit status; any other error prints and exits 1.
    mutating func run() async throws
}

extension ParsableCommand {
    public mutating func validate() throws {}
    public mutating func run() async throws {
        throw ValidationError("'\(Self.configuration.commandName)' needs a subcommand")
    }
}

/// What a command is called and says about itself. Sendable as checked by the compiler: the
/// subcommands' metatypes are (``ParsableCommand`` refines `SendableMetatype`).
public struct CommandConfiguration: Sendable {
    public var commandName: String
    public var abstract: String
    public var discussion: String
    public var subcommands: [any ParsableCommand.Type]
    /// Left out of the parent's list of subcommands: a helper another command starts as a
    /// child process, not something to type (it still answers `--help`).
    public var isHidden: Bool

    public init(
        commandName: String, abstract: String, discussion: String = "", subcommands: [any ParsableCommand.Type] = [],
        isHidden: Bool = false
    ) {
        self.commandName = commandName
        self.abstract = abstract
        self.discussion = discussion
        self.subcommands = subcommands
        self.isHidden = isHidden
    }
}

/// A mistake in how the command was called: printed with the usage, exit status 64.
public struct ValidationError: Error, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Ends the program with this status, after printing `message` (if any) on standard error.
public struct ExitCode: Error, Equatable, CustomStringConvertible {
    public var code: Int32
    public var message: String?
    public init(_ code: Int32, _ message: String? = nil) {
        self.code = code
        self.message = message
    }
    public static let success = ExitCode(0)
    public static let failure = ExitCode(1)
    /// EX_USAGE from sysexits.h.
    public static let usage = ExitCode(64)
    public var description: String { message ?? "exit \(code)" }
}

/// Types an option or argument value can be read as.
public protocol ExpressibleByArgument {
    init?(argument: String)
    /// What the help shows for the value, e.g. `<file>`.
    static var defaultValueName: String { get }
}

extension String: ExpressibleByArgument {
    public init?(argument: String) { self = argument }
    public static var defaultValueName: String { "value" }
}
extension Int: ExpressibleByArgument {
    public init?(argument: String) { self.init(argument) }
    public static var defaultValueName: String { "n" }
}
extension Double: ExpressibleByArgument {
    public init?(argument: String) {
        guard let value = Double(argument), value.isFinite else { return nil }
        self = value
    }
    public static var defaultValueName: String { "number" }
}

extension ExpressibleByArgument where Self: RawRepresentable, RawValue == String, Self: CaseIterable {
    public init?(argument: String) { self.init(rawValue: argument) }
    public static var defaultValueName: String { allCases.map(\.rawValue).joined(separator: "|") }
}
