import CProcess
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with `posix_spawn`, with a clean signal mask.
///
/// Foundation's `Process` passes on the spawning thread's signal mask, and Dispatch's worker
/// threads block SIGTERM and SIGINT: a `mosquitto` started from one of them never sees the
/// SIGTERM meant to stop it. Here the child always starts with no signals blocked and default
/// handlers.
public final class Subprocess: Sendable {
    /// Where a standard stream of the child goes.
    public enum Stream: Sendable {
        case inherit
        case null
        /// A file, created if missing (for standard output and error).
        case file(String, append: Bool)
        /// A file to read (for standard input).
        case input(String)
        /// An open descriptor of ours (e.g. the write end of a pipe).
        case descriptor(Int32)
    }

    /// How the child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signalled(Int32)

        public var description: String {
            switch self {
            case .exited(let status): "exited with status \(status)"
            case .signalled(let number): "killed by \(Signals.name(number))"
            }
        }
    }

    public struct SpawnError: Error, CustomStringConvertible {
        public var executable: String
        public var reason: String
        public var description: String { "cannot start \(executable): \(reason)" }
    }

    public let pid: pid_t
    public let executable: String
    private let termination = Mutex<Termination?>(nil)

    private init(pid: pid_t, executable: String) {
        self.pid = pid
        self.executable = executable
    }

    /// Starts `executable` with `arguments`.
    /// - Parameters:
    ///   - environment: the child's whole environment; nil passes ours on.
    ///   - newProcessGroup: put the child in a process group of its own, so that a Ctrl-C at the
    ///     terminal reaches only us and we stop the child in our own order.
    ///   - descriptors: more descriptors for the child, ours → its number (e.g. a pipe as its
    ///     descriptor 3, for `chromium --remote-debugging-pipe`).
    public static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        stdin: Stream = .null, stdout: Stream = .inherit, stderr: Stream = .inherit, newProcessGroup: Bool = false,
        descriptors: [(ours: Int32, child: Int32)] = []
    ) throws -> Subprocess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (ours, child) in descriptors { posix_spawn_file_actions_adddup2(&actions, ours, child) }
        for (stream, target) in [(stdin, Int32(0)), (stdout, 1), (stderr, 2)] {
            switch stream {
            case .inherit: break
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path, let append):
                posix_spawn_file_actions_addopen(
                    &actions, target, path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o644)
            case .input(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_RDONLY, 0)
            case .descriptor(let fd):
                posix_spawn_file_actions_adddup2(&actions, fd, target)
            }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2, SIGCHLD] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var flags = Int32(POSIX_SPAWN_SETSIGMASK) | Int32(POSIX_SPAWN_SETSIGDEF)
        if newProcessGroup {
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
            posix_spawnattr_setpgroup(&attributes, 0)
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let environmentLines = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let envp = environmentLines.map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }

        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw SpawnError(executable: executable, reason: String(cString: strerror(rc))) }
        return Subprocess(pid: pid, executable: executable)
    }

    /// The directories searched for programs: PATH, then Debian's sbin directories (where
    /// `mosquitto` lives, often missing from a non-root PATH).
    public static var searchPath: [String] {
        (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
            + ["/usr/bin", "/usr/sbin", "/usr/local/sbin"]
    }

    /// The full path of an executable named `name` in ``searchPath``, or nil.
    public static func find(_ name: String) -> String? {
        searchPath.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Sends a signal (SIGTERM by default) if the child is still running.
    public func signal(_ number: Int32 = SIGTERM) {
        guard poll() == nil else { return }
        _ = Glibc.kill(pid, number)
    }

    /// The termination if the child has ended, without waiting.
    @discardableResult
    public func poll() -> Termination? {
        termination.withLock { termination in
            if let termination { return termination }
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            guard result == pid else { return nil }
            termination = Self.decode(status)
            return termination
        }
    }

    public var isRunning: Bool { poll() == nil }

    /// Waits for the child to end without holding a thread. Cancellation does not end the
    /// wait: the child has not ended.
    @discardableResult
    public func wait() async -> Termination {
        while true {
            if let termination = await wait(timeout: .seconds(3_600)) { return termination }
        }
    }

    /// Waits at most `grace` for the child to end; past it, kills it (SIGKILL) and waits for
    /// that. Returns how it ended, and whether it had to be killed: what a caller that gives a
    /// child a deadline does, so that no child outlives its caller's patience or is left a zombie.
    @discardableResult
    public func end(within grace: Duration) async -> (termination: Termination, killed: Bool) {
        if let termination = await wait(timeout: grace) { return (termination, false) }
        signal(SIGKILL)
        return (await wait(), true)
    }

    /// Waits at most `timeout` for the child to end; nil if it is still running then.
    ///
    /// Woken by the kernel, not by polling: a `pidfd_open(2)` descriptor turns readable when the
    /// child ends, and a Dispatch source on it and a timer resume the wait, whichever comes
    /// first. (Polling `waitpid` every 5 ms cost a waiting test or `perimeter up` 200 wake-ups a
    /// second.) Where the kernel has no pidfd (before Linux 5.3) it looks every 5 ms.
    public func wait(timeout: Duration) async -> Termination? {
        if let termination = poll() { return termination }
        let descriptor = perimeter_pidfd_open(pid)
        // ESRCH: reaped meanwhile by another caller of `poll()`, which kept its termination.
        if descriptor < 0 && errno == ESRCH { return poll() }
        let queue = DispatchQueue(label: "perimeter.subprocess.wait")
        await withCheckedContinuation { (resume: CheckedContinuation<Void, Never>) in
            // Every handler runs on `queue`: the first to fire ends the wait, once.
            let timer = DispatchSource.makeTimerSource(queue: queue)
            let exit = descriptor >= 0 ? DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue) : nil
            var resumed = false
            let end = {
                guard !resumed else { return }
                resumed = true
                timer.cancel()
                exit?.cancel()
                resume.resume()
            }
            // The descriptor is closed once its source is done with it.
            exit?.setCancelHandler { close(descriptor) }
            exit?.setEventHandler(handler: end)
            if exit != nil {
                timer.schedule(deadline: .now() + Self.dispatchInterval(timeout))
                timer.setEventHandler(handler: end)
            } else {
                let deadline = DispatchTime.now() + Self.dispatchInterval(timeout)
                timer.schedule(deadline: .now(), repeating: .milliseconds(5))
                timer.setEventHandler { [self] in
                    if poll() != nil || DispatchTime.now() >= deadline { end() }
                }
            }
            exit?.resume()
            timer.resume()
        }
        return poll()
    }

    private static func dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = Double(seconds) * 1e9 + Double(attoseconds) / 1e9
        return .nanoseconds(Int(min(max(0, nanoseconds), Double(Int.max / 2))))
    }

    /// Waits for the child to end, blocking the calling thread.
    @discardableResult
    public func waitBlocking() -> Termination {
        termination.withLock { termination in
            if let termination { return termination }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            let result = Self.decode(status)
            termination = result
            return result
        }
    }

    private static func decode(_ status: Int32) -> Termination {
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift cannot import.
        let signal = status & 0x7F
        return signal == 0 ? .exited((status >> 8) & 0xFF) : .signalled(signal)
    }
}
