import Foundation

/// Parses the command line into a command and runs it; returns the exit status.
///
/// Exit statuses: 0 success, 1 failure, 64 usage (an unknown subcommand, a bad flag or a
/// missing value prints the usage on standard error).
public enum CommandRunner {
    public static func main(_ root: any ParsableCommand.Type, arguments: [String]) async -> Int32 {
        var path: [any ParsableCommand.Type] = [root]
        var remaining = arguments[...]
        // `perimeter help [subcommand…]` is `perimeter [subcommand…] --help`.
        if remaining.first == "help" {
            remaining = remaining.dropFirst()
            var target: any ParsableCommand.Type = root
            for name in remaining {
                guard let next = target.configuration.subcommands.first(where: { $0.configuration.commandName == name })
                else {
                    return usageError(UnknownSubcommand(name: name, type: target).description, path: path)
                }
                target = next
                path.append(next)
            }
            print(help(for: path))
            return 0
        }
        while let next = remaining.first,
            let subcommand = path.last!.configuration.subcommands.first(where: { $0.configuration.commandName == next })
        {
            path.append(subcommand)
            remaining = remaining.dropFirst()
        }
        let type = path.last!
        var command = type.init()
        let slots = declaredSlots(of: command)
        do {
            if try parse(Array(remaining), into: slots, type: type) == .help {
                print(help(for: path))
                return 0
            }
        } catch let error as ValidationError {
            return usageError(error.message, path: path)
        } catch {
            return usageError("\(error)", path: path)
        }
        do {
            try command.validate()
        } catch let error as ValidationError {
            return usageError(error.message, path: path)
        } catch {
            printError("error: \(error)")
            return 1
        }
        do {
            try await command.run()
            return 0
        } catch let exit as ExitCode {
            if let message = exit.message { printError(message) }
            return exit.code
        } catch let error as ValidationError {
            return usageError(error.message, path: path)
        } catch {
            printError("error: \(error)")
            return 1
        }
    }

    enum ParseOutcome { case run, help }

    /// The option, flag and argument slots of a command, named after their properties.
    static func declaredSlots(of command: any ParsableCommand) -> [ArgumentSlot] {
        var slots: [ArgumentSlot] = []
        for child in Mirror(reflecting: command).children {
            guard let declared = child.value as? any DeclaredArgument else { continue }
            let slot = declared.slot
            if slot.names.isEmpty, slot.kind != .positional, let label = child.label {
                slot.names = ["--" + kebab(String(label.dropFirst()))]
            } else if slot.kind == .positional, let label = child.label, slot.names.isEmpty {
                slot.names = [kebab(String(label.dropFirst()))]
            }
            slots.append(slot)
        }
        return slots
    }

    static func kebab(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase {
                result += "-" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }

    /// A word where a command group expects one of its subcommands: a usage error even with
    /// `--help`, since printing the group's help would answer as if the command existed.
    struct UnknownSubcommand: Error, CustomStringConvertible {
        let description: String

        /// Names are read here: an error holds no metatype (it must be Sendable).
        init(name: String, type: any ParsableCommand.Type) {
            let known = type.configuration.subcommands.map { $0.configuration.commandName }
            description =
                "unknown subcommand '\(name)' of '\(type.configuration.commandName)' (known: "
                + known.joined(separator: ", ") + ")"
        }
    }

    static func parse(
        _ arguments: [String], into slots: [ArgumentSlot], type: any ParsableCommand.Type
    ) throws -> ParseOutcome {
        let isHelp: (String) -> Bool = { $0 == "--help" || $0 == "-h" }
        guard arguments.contains(where: isHelp) else {
            try parseValues(arguments, into: slots, type: type)
            return .run
        }
        // Help is shown whatever else is wrong with the line (a missing argument, a bad value),
        // except a subcommand that does not exist.
        do {
            try parseValues(arguments.filter { !isHelp($0) }, into: slots, type: type)
        } catch let error as UnknownSubcommand {
            throw error
        } catch {}
        return .help
    }

    private static func parseValues(
        _ arguments: [String], into slots: [ArgumentSlot], type: any ParsableCommand.Type
    ) throws {
        var positionals = slots.filter { $0.kind == .positional }[...]
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" && !onlyPositionals {
                onlyPositionals = true
                continue
            }
            if argument.hasPrefix("-") && argument != "-" && !onlyPositionals {
                var name = argument
                var inline: String?
                if let equals = argument.firstIndex(of: "=") {
                    name = String(argument[..<equals])
                    inline = String(argument[argument.index(after: equals)...])
                }
                guard let slot = slots.first(where: { $0.kind != .positional && $0.names.contains(name) }) else {
                    throw ValidationError("unknown option '\(name)'")
                }
                if slot.kind == .flag {
                    if inline != nil { throw ValidationError("\(name) takes no value") }
                    slot.acceptFlag()
                    continue
                }
                guard let value = inline ?? (index < arguments.count ? arguments[index] : nil) else {
                    throw ValidationError("\(name) needs a value <\(slot.valueName)>")
                }
                if inline == nil { index += 1 }
                if slot.wasSet && !slot.isRepeating { throw ValidationError("\(name) given twice") }
                guard slot.accept(value) else {
                    throw ValidationError("\(name): '\(value)' is not a valid <\(slot.valueName)>")
                }
                continue
            }
            // A repeating positional takes every value after it, so it stays first.
            guard let slot = positionals.first else {
                if !type.configuration.subcommands.isEmpty {
                    throw UnknownSubcommand(name: argument, type: type)
                }
                throw ValidationError("unexpected argument '\(argument)'")
            }
            if !slot.isRepeating { positionals.removeFirst() }
            guard slot.accept(argument) else {
                throw ValidationError("'\(argument)' is not a valid <\(slot.valueName)>")
            }
        }
        for slot in slots where slot.isRequired && !slot.wasSet {
            if slot.kind == .positional { throw ValidationError("missing argument <\(slot.valueName)>") }
            throw ValidationError("missing \(slot.names[0]) <\(slot.valueName)>")
        }
    }

    static func usageError(_ message: String, path: [any ParsableCommand.Type]) -> Int32 {
        printError("error: \(message)\n")
        printError(usage(for: path))
        printError("See '\(path.map { $0.configuration.commandName }.joined(separator: " ")) --help'.")
        return 64
    }

    static func printError(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    static func usage(for path: [any ParsableCommand.Type]) -> String {
        let type = path.last!
        let slots = declaredSlots(of: type.init())
        var parts = [path.map { $0.configuration.commandName }.joined(separator: " ")]
        if !type.configuration.subcommands.isEmpty { parts.append("<subcommand>") }
        for slot in slots where slot.kind != .positional {
            let text = slot.kind == .flag ? slot.names[0] : "\(slot.names[0]) <\(slot.valueName)>"
            parts.append(slot.isRequired ? text : "[\(text)]" + (slot.isRepeating ? " ..." : ""))
        }
        for slot in slots where slot.kind == .positional {
            parts.append(
                slot.isRequired ? "<\(slot.valueName)>" : "[<\(slot.valueName)>" + (slot.isRepeating ? " ...]" : "]"))
        }
        return "USAGE: " + parts.joined(separator: " ")
    }

    static func help(for path: [any ParsableCommand.Type]) -> String {
        let type = path.last!
        let configuration = type.configuration
        var lines = ["OVERVIEW: \(configuration.abstract)", ""]
        if !configuration.discussion.isEmpty { lines += [configuration.discussion, ""] }
        lines += [usage(for: path), ""]
        let slots = declaredSlots(of: type.init())
        func row(_ left: String, _ right: String) -> String {
            let padded =
                left.count < 26
                ? left.padding(toLength: 26, withPad: " ", startingAt: 0)
                : left + "\n" + String(repeating: " ", count: 26)
            return "  " + padded + right
        }
        let positionals = slots.filter { $0.kind == .positional }
        if !positionals.isEmpty {
            lines.append("ARGUMENTS:")
            for slot in positionals {
                lines.append(
                    row("<\(slot.valueName)>", slot.help + (slot.defaultDescription.map { " (default: \($0))" } ?? "")))
            }
            lines.append("")
        }
        lines.append("OPTIONS:")
        for slot in slots where slot.kind != .positional {
            let left =
                slot.kind == .flag
                ? slot.names.joined(separator: ", ") : "\(slot.names.joined(separator: ", ")) <\(slot.valueName)>"
            lines.append(row(left, slot.help + (slot.defaultDescription.map { " (default: \($0))" } ?? "")))
        }
        lines.append(row("-h, --help", "Show help information."))
        if !configuration.subcommands.isEmpty {
            lines += ["", "SUBCOMMANDS:"]
            for subcommand in configuration.subcommands where !subcommand.configuration.isHidden {
                lines.append(row(subcommand.configuration.commandName, subcommand.configuration.abstract))
            }
            lines += [
                "",
                "  See '\(path.map { $0.configuration.commandName }.joined(separator: " ")) help <subcommand>' for detailed help.",
            ]
        }
        return lines.joined(separator: "\n")
    }
}
