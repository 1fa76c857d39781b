import Foundation
import PerimeterCore
import Synchronization

/// Who may see the dashboard: one shared password, sessions behind an `HttpOnly`,
/// `SameSite=Strict` cookie, single-use login links, and a brake on guessing.
///
/// Every rule with a time in it (session lifetime, link lifetime, the guessing window) reads
/// the ``TimeSource`` it is given, so tests move a manual clock instead of waiting.
///
/// Memory is bounded whatever clients do: at most ``Settings/maxSessions`` sessions (the
/// oldest go first), ``Settings/maxLoginTokens`` links, and failure counts for at most
/// ``Settings/maxTrackedClients`` addresses.
public final class DashboardAuth: Sendable {
    public struct Settings: Sendable {
        public var password: String
        /// A session lasts this long after login (seconds); the cookie's Max-Age.
        public var sessionLifetime: Double = 12 * 3600
        /// A login link must be used within this long (seconds), and only once.
        public var loginTokenLifetime: Double = 600
        /// Mark the cookie `Secure`: set when the dashboard is reached over HTTPS (a proxy).
        public var secureCookie = false
        /// Failed logins from one address within ``failureWindow`` before it must wait.
        public var maxFailures = 10
        public var failureWindow: Double = 60
        public var maxSessions = 1000
        public var maxLoginTokens = 100
        public var maxTrackedClients = 10_000

        public init(password: String, secureCookie: Bool = false) {
            self.password = password
            self.secureCookie = secureCookie
        }
    }

    public static let cookieName = "perimeter_session"

    public enum LoginResult: Equatable, Sendable {
        /// Logged in: the new session's token (the cookie's value).
        case session(String)
        case wrongPassword
        /// Too many failures from this address: try again after this many seconds.
        case throttled(retryAfter: Int)
    }

    private struct State {
        var sessions: [String: Date] = [:]
        var loginTokens: [String: Date] = [:]
        var failures: [String: (count: Int, since: Date)] = [:]
    }

    public let settings: Settings
    private let clock: any TimeSource
    private let state = Mutex(State())

    public init(settings: Settings, clock: any TimeSource = SystemTimeSource()) {
        self.settings = settings
        self.clock = clock
    }

    /// 32 random bytes as hex (64 characters), from the system's cryptographic generator (getrandom on Linux).
    public static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// Compares without an early exit, so the time taken does not say how much of a guess was
    /// right: it depends only on the guess's length.
    static func constantTimeEquals(_ guess: String, _ secret: String) -> Bool {
        let a = Array(guess.utf8)
        let b = Array(secret.utf8)
        var difference: UInt8 = a.count == b.count ? 0 : 1
        if b.isEmpty { return false }
        for index in a.indices { difference |= a[index] ^ b[index % b.count] }
        return difference == 0
    }

    /// Checks a password from the login form.
    public func login(password: String, client: String) -> LoginResult {
        let now = clock.now
        let allowed = state.withLock { state -> Int? in
            guard let record = state.failures[client] else { return nil }
            if now.timeIntervalSince(record.since) >= settings.failureWindow {
                state.failures[client] = nil
                return nil
            }
            guard record.count >= settings.maxFailures else { return nil }
            return Int((settings.failureWindow - now.timeIntervalSince(record.since)).rounded(.up))
        }
        // Throttled addresses are refused before the password is looked at.
        if let retryAfter = allowed { return .throttled(retryAfter: max(1, retryAfter)) }
        guard Self.constantTimeEquals(password, settings.password) else {
            state.withLock { state in
                if state.failures[client] == nil && state.failures.count >= settings.maxTrackedClients {
                    // Forget the oldest record rather than grow: a flood of addresses must not
                    // exhaust memory (each address still meets the brake while it is tracked).
                    if let oldest = state.failures.min(by: { $0.value.since < $1.value.since })?.key {
                        state.failures[oldest] = nil
                    }
                }
                var record = state.failures[client] ?? (0, now)
                record.count += 1
                state.failures[client] = record
            }
            return .wrongPassword
        }
        state.withLock { $0.failures[client] = nil }
        return .session(newSession(now))
    }

    /// A single-use login link's token, valid for ``Settings/loginTokenLifetime``.
    public func issueLoginToken() -> String {
        let token = Self.randomToken()
        let expiry = clock.now.addingTimeInterval(settings.loginTokenLifetime)
        state.withLock { state in
            Self.prune(&state.loginTokens, now: clock.now, keep: settings.maxLoginTokens - 1)
            state.loginTokens[token] = expiry
        }
        return token
    }

    /// Trades a login link's token for a session; nil when unknown, used or expired.
    public func redeem(loginToken token: String) -> String? {
        let now = clock.now
        let valid = state.withLock { state -> Bool in
            guard let expiry = state.loginTokens.removeValue(forKey: token) else { return false }
            return now < expiry
        }
        return valid ? newSession(now) : nil
    }

    /// True when `token` (the cookie's value) names a live session.
    public func isValid(session token: String?) -> Bool {
        guard let token, !token.isEmpty else { return false }
        let now = clock.now
        return state.withLock { state in
            guard let expiry = state.sessions[token] else { return false }
            if now >= expiry {
                state.sessions[token] = nil
                return false
            }
            return true
        }
    }

    public func end(session token: String?) {
        guard let token else { return }
        state.withLock { _ = $0.sessions.removeValue(forKey: token) }
    }

    public var sessionCount: Int { state.withLock { $0.sessions.count } }

    private func newSession(_ now: Date) -> String {
        let token = Self.randomToken()
        state.withLock { state in
            Self.prune(&state.sessions, now: now, keep: settings.maxSessions - 1)
            state.sessions[token] = now.addingTimeInterval(settings.sessionLifetime)
        }
        return token
    }

    /// Drops expired entries, then the ones expiring soonest until at most `keep` remain.
    private static func prune(_ entries: inout [String: Date], now: Date, keep: Int) {
        entries = entries.filter { $0.value > now }
        if entries.count > keep {
            for (key, _) in entries.sorted(by: { $0.value < $1.value }).prefix(entries.count - max(0, keep)) {
                entries[key] = nil
            }
        }
    }

    /// The `Set-Cookie` value carrying a session.
    public func cookie(for token: String) -> String {
        "\(Self.cookieName)=\(token); Path=/; Max-Age=\(Int(settings.sessionLifetime)); HttpOnly; SameSite=Strict"
            + (settings.secureCookie ? "; Secure" : "")
    }

    /// The `Set-Cookie` value that removes the session cookie.
    public var clearingCookie: String {
        "\(Self.cookieName)=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + (settings.secureCookie ? "; Secure" : "")
    }
}
