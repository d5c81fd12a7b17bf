// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "countdownd",
    products: [
        .executable(name: "countdownd", targets: ["countdownd"]),
        .executable(name: "cdctl", targets: ["cdctl"]),
        .library(name: "CountdownCore", targets: ["CountdownCore"]),
        .library(name: "CountdownClient", targets: ["CountdownClient"]),
    ],
    targets: [
        // C libraries from Debian, reached through system-library targets.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // HTTP to etcd for cluster mode, through libcurl's multi-socket interface.
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),

        // The few Linux calls Glibc's module map does not expose (timerfd, SO_PEERCRED, timer slack).
        .target(name: "CLinuxShims"),

        // The pure core: engine, scheduler, durations, names, protocol codec. No I/O, no clock reads.
        .target(name: "CountdownCore"),

        // The imperative shell: sockets, Dispatch, systemd, storage, etcd.
        .target(name: "CountdownDaemon", dependencies: ["CountdownCore", "CSystemd", "CSQLite", "CCurl", "CLinuxShims"]),

        // Connection and request/response logic shared by cdctl and the tests.
        .target(name: "CountdownClient", dependencies: ["CountdownCore", "CLinuxShims"]),

        // cdctl's argument parsing, commands and output formatting.
        .target(name: "CountdownCLI", dependencies: ["CountdownCore", "CountdownClient", "CLinuxShims"]),

        // Thin executables.
        .executableTarget(name: "countdownd", dependencies: ["CountdownDaemon"]),
        .executableTarget(name: "cdctl", dependencies: ["CountdownCLI"]),

        // CountdownClient behind the client conformance suite's driver protocol (clients/conformance/).
        .executableTarget(name: "ConformanceDriver", dependencies: ["CountdownClient", "CountdownCore"], path: "Tests/ConformanceDriver"),

        .testTarget(name: "CountdownCoreTests", dependencies: ["CountdownCore", "CountdownCLI"]),
        // A real etcd cluster on loopback ports, for the etcd client's and cluster mode's tests.
        .target(name: "EtcdTestSupport", path: "Tests/EtcdTestSupport"),
        .testTarget(name: "CountdownDaemonTests", dependencies: ["CountdownDaemon", "CountdownCore", "EtcdTestSupport"]),
        .testTarget(
            name: "CountdownIntegrationTests",
            dependencies: ["CountdownCore", "CountdownClient", "countdownd", "cdctl", "EtcdTestSupport"]
        ),
    ]
)

// The same language settings for every target, stated once.
for target in package.targets where target.type != .system && target.name != "CLinuxShims" {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    target.swiftSettings = settings
}

// The daemon's release build leaves out the run-time exclusivity checks. They catch two
// overlapping accesses to one variable on one thread (a closure, or a call back into an object,
// touching a property while a mutating access to it is in progress): the compiler rules out the
// rest statically, in both builds, and the daemon's mutable state belongs to one queue. The debug
// build, which the component and integration suites run, keeps the checks, so a violation on
// any path those suites take traps there; one on a path no test takes would not trap in release.
// Callgrind on the real daemon (`make bench-instructions`) counted the checks at 15 % of its
// instructions per delivered event and 13 % per START: each access to a class's stored property
// registers itself in a thread-local set and takes itself out again.
for target in package.targets where target.name == "CountdownDaemon" {
    var settings = target.swiftSettings ?? []
    settings.append(.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release)))
    target.swiftSettings = settings
}
