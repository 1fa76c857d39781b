/// `perimeter bench …`: measurements side by side with a named baseline, in one run.
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench", abstract: "Benchmarks against named baselines, reporting ratios.",
        discussion: "Run on a release build ('swift build -c release') for meaningful figures.",
        subcommands: [
            BenchMQTTCommand.self, BenchGeoCommand.self, BenchBeaconsCommand.self, BenchPipelineCommand.self,
            BenchNotifierCommand.self, BenchScaleCommand.self, BenchNullEvaluatorCommand.self,
            BenchDashboardCommand.self, BenchRestartCommand.self, BenchIdleCommand.self,
        ])
}
