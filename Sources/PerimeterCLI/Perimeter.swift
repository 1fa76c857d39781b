/// `perimeter`: the operator's command and every service's entry point.
public struct Perimeter: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "perimeter",
        abstract: "MQTT-native geofences and beacons for venues.",
        discussion: """
            Run 'perimeter up' for the embedded demo: a private Mosquitto on loopback, the
            services and a sample venue. Every other command works offline on files or
            against a broker you name.
            """,
        subcommands: [
            VersionCommand.self, UpCommand.self, EvaluatorCommand.self, NotifierCommand.self, AgentCommand.self,
            RegionsCommand.self, RulesCommand.self, LocateCommand.self, ReplayCommand.self, RenderCommand.self,
            DashboardCommand.self,
            AdvCommand.self, SubjectsCommand.self, DoctorCommand.self, BenchCommand.self, PartitionsCommand.self,
        ])

    public init() {}

    /// Runs `perimeter` with the process's arguments; returns the exit status.
    public static func main(arguments: [String] = Array(CommandLine.arguments.dropFirst())) async -> Int32 {
        await CommandRunner.main(Perimeter.self, arguments: arguments)
    }
}

/// `perimeter version`.
struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version", abstract: "Print the version.")

    static let version = "0.1.0"

    func run() async throws {
        print("perimeter \(Self.version)")
    }
}
