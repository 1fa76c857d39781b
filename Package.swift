// swift-tools-version:6.0
import PackageDescription

// The layout follows dependencies (STYLE.md): C headers, a pure core, thin wrappers
// around each C library, a service kit, command logic as a library, a thin executable.
let package = Package(
    name: "Perimeter",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "perimeter", targets: ["perimeter"]),
        .library(name: "PerimeterCore", targets: ["PerimeterCore"]),
        .library(name: "PerimeterMQTT", targets: ["PerimeterMQTT"]),
        .library(name: "PerimeterStore", targets: ["PerimeterStore"]),
        .library(name: "PerimeterHTTP", targets: ["PerimeterHTTP"]),
        .library(name: "PerimeterKit", targets: ["PerimeterKit"]),
        .library(name: "PerimeterEvaluator", targets: ["PerimeterEvaluator"]),
        .library(name: "PerimeterNotifier", targets: ["PerimeterNotifier"]),
        .library(name: "PerimeterDashboard", targets: ["PerimeterDashboard"]),
        .library(name: "PerimeterAgent", targets: ["PerimeterAgent"]),
        .library(name: "PerimeterNATS", targets: ["PerimeterNATS"]),
    ],
    targets: [
        // C libraries from Debian, headers only.
        .systemLibrary(
            name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CNats", pkgConfig: "libnats", providers: [.apt(["libnats-dev"])]),
        // Linux's pidfd_open(2), which glibc 2.36 does not declare: a header, no library.
        .systemLibrary(name: "CProcess"),

        // Pure domain: geometry, geodesy, spatial index, region state machine. No C, no I/O.
        .target(name: "PerimeterCore"),

        // Thin wrappers: the only importers of their C library.
        .target(name: "PerimeterMQTT", dependencies: ["CMosquitto"]),
        .target(name: "PerimeterStore", dependencies: ["CSQLite"]),
        // Webhook (HTTP) and mail (SMTP) clients over libcurl, HMAC-SHA256 over libcrypto, plain
        // TCP for the agent's gpsd socket: the only importer of libcurl and OpenSSL.
        .target(name: "PerimeterNet", dependencies: ["PerimeterCore", "CCurl", "COpenSSL"]),
        // Every HTTP endpoint we serve (dashboard, /metrics, /healthz) on libmicrohttpd: the only
        // importer of CMicroHTTPD. Its own target, not part of the kit, so that the layout shows
        // which module speaks to which C library; PerimeterKit re-exports `HTTPServer`.
        .target(name: "PerimeterHTTP", dependencies: ["CMicroHTTPD"]),
        // JetStream key-value (partition leases, docs/scale.md) over the NATS C client: the only
        // importer of CNats.
        .target(name: "PerimeterNATS", dependencies: ["CNats"]),

        // Service kit: Service protocol, service group, signals, logging, configuration, broker process;
        // it re-exports PerimeterHTTP's server for the services' endpoints.
        .target(
            name: "PerimeterKit",
            dependencies: ["PerimeterCore", "PerimeterMQTT", "PerimeterHTTP", "PerimeterNet", "CProcess"]),

        // Services as libraries: the region evaluator (journal, outbox, MQTT wiring around the core).
        .target(
            name: "PerimeterEvaluator",
            dependencies: [
                "PerimeterCore", "PerimeterMQTT", "PerimeterStore", "PerimeterKit", "PerimeterNet", "PerimeterNATS",
            ]),

        // The notifier: rules, templates, outbox and channels around the core.
        .target(
            name: "PerimeterNotifier",
            dependencies: ["PerimeterCore", "PerimeterMQTT", "PerimeterStore", "PerimeterKit", "PerimeterNet"]),
        // The live dashboard: a consumer of the venue's topics serving one page and its event stream.
        .target(name: "PerimeterDashboard", dependencies: ["PerimeterCore", "PerimeterMQTT", "PerimeterKit"]),
        // The edge agent: gpsd, replay, simulator and HCI sources, store-and-forward outbox.
        .target(
            name: "PerimeterAgent",
            dependencies: ["PerimeterCore", "PerimeterMQTT", "PerimeterStore", "PerimeterKit", "PerimeterNet"]),

        // Operator commands as a library; `perimeter` is only its entry point.
        .target(
            name: "PerimeterCLI",
            dependencies: [
                "PerimeterCore", "PerimeterMQTT", "PerimeterStore", "PerimeterKit", "PerimeterEvaluator",
                "PerimeterNotifier", "PerimeterNet", "PerimeterDashboard", "PerimeterAgent",
            ]),
        .executableTarget(name: "perimeter", dependencies: ["PerimeterCLI"]),

        // Tests' shared parts: broker launcher, in-memory log handler, fake clock, fixtures.
        .target(
            name: "PerimeterTestSupport",
            dependencies: ["PerimeterCore", "PerimeterMQTT", "PerimeterKit", "perimeter-testpeer", "perimeter"]),
        // A process the tests start and kill (e.g. in the middle of a SQLite transaction).
        .executableTarget(
            name: "perimeter-testpeer",
            dependencies: [
                "PerimeterStore", "PerimeterMQTT", "PerimeterCore", "PerimeterKit", "PerimeterNATS",
                "PerimeterEvaluator",
            ]),

        .testTarget(
            name: "PerimeterCoreTests",
            dependencies: ["PerimeterCore", "PerimeterTestSupport"],
            resources: [.copy("Fixtures")]),
        .testTarget(
            name: "PerimeterMQTTTests", dependencies: ["PerimeterMQTT", "PerimeterTestSupport"]),
        .testTarget(
            name: "PerimeterStoreTests",
            dependencies: ["PerimeterStore", "PerimeterTestSupport"]),
        .testTarget(
            name: "PerimeterKitTests", dependencies: ["PerimeterKit", "PerimeterHTTP", "PerimeterTestSupport"]),
        .testTarget(
            name: "PerimeterEvaluatorTests",
            dependencies: ["PerimeterEvaluator", "PerimeterNATS", "PerimeterTestSupport", "perimeter"],
            resources: [.copy("Fixtures")]),
        .testTarget(
            name: "PerimeterNotifierTests",
            dependencies: ["PerimeterNotifier", "PerimeterNet", "PerimeterTestSupport", "perimeter"],
            resources: [.copy("Peers")]),
        .testTarget(
            name: "PerimeterBrokerTierTests",
            dependencies: ["PerimeterKit", "PerimeterNATS", "PerimeterEvaluator", "PerimeterTestSupport", "perimeter"],
            resources: [.copy("Peers")]),
        .testTarget(
            name: "PerimeterDashboardTests",
            dependencies: ["PerimeterDashboard", "PerimeterEvaluator", "PerimeterTestSupport", "perimeter"]),
        .testTarget(
            name: "PerimeterAgentTests",
            dependencies: ["PerimeterAgent", "PerimeterStore", "PerimeterTestSupport"],
            resources: [.copy("Fixtures")]),
        .testTarget(
            name: "PerimeterCLITests",
            dependencies: ["PerimeterCLI", "PerimeterTestSupport", "perimeter"],
            resources: [.copy("Fixtures")]),
    ],
    swiftLanguageModes: [.v6]
)
