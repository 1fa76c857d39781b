import CMosquitto

/// A failure of the MQTT client, naming the operation, libmosquitto's reason and the input.
///
/// Every libmosquitto return code passes through ``MQTTError/check(_:_:context:)`` so that
/// no failure is silently dropped and each one says which call failed on which input.
public struct MQTTError: Error, CustomStringConvertible, Sendable, Equatable {
    /// What kind of failure this is.
    public enum Kind: Sendable, Equatable {
        /// A libmosquitto call returned this `MOSQ_ERR_*` code.
        case library(Int32)
        /// The broker refused the connection with this CONNACK reason code.
        case connectionRefused(Int32)
        /// The broker refused a subscription (SUBACK reason code ≥ 0x80).
        case subscriptionRefused(Int32)
        /// The broker answered a QoS ≥ 1 publish with a failure reason code.
        case publishRefused(Int32)
        /// The operation did not complete in time.
        case timeout
        /// The client was shut down while the operation was pending.
        case closed
        /// An argument was rejected before it reached libmosquitto.
        case invalidArgument
    }

    public let kind: Kind
    /// The operation that failed, usually the C function's name (`mosquitto_publish_v5`).
    public let operation: String
    /// libmosquitto's own words for the failure.
    public let reason: String
    /// The input the operation was working on (a topic, a host and port).
    public let context: String?

    public init(_ kind: Kind, operation: String, reason: String, context: String? = nil) {
        self.kind = kind
        self.operation = operation
        self.reason = reason
        self.context = context
    }

    public var description: String {
        var text = operation
        if let context { text += " (\(context))" }
        text += ": \(reason)"
        switch kind {
        case .library(let code): text += " [MOSQ_ERR \(code)]"
        case .connectionRefused(let code), .subscriptionRefused(let code), .publishRefused(let code):
            text += " [reason code \(code)]"
        case .timeout, .closed, .invalidArgument: break
        }
        return text
    }

    /// Throws an ``MQTTError`` unless `rc` is `MOSQ_ERR_SUCCESS`.
    @inline(__always)
    static func check(_ rc: Int32, _ operation: String, context: @autoclosure () -> String? = nil) throws(MQTTError) {
        guard rc != Int32(MOSQ_ERR_SUCCESS.rawValue) else { return }
        throw MQTTError.library(rc, operation, context: context())
    }

    static func library(_ rc: Int32, _ operation: String, context: String? = nil) -> MQTTError {
        var reason = String(cString: mosquitto_strerror(rc))
        if rc == Int32(MOSQ_ERR_ERRNO.rawValue) {
            reason = String(cString: strerror(errno))
        }
        return MQTTError(.library(rc), operation: operation, reason: reason, context: context)
    }

    /// The text libmosquitto gives for an MQTT 5 reason code (CONNACK, SUBACK, PUBACK …).
    static func reasonText(_ code: Int32) -> String {
        String(cString: mosquitto_reason_string(code))
    }
}

#if canImport(Glibc)
    import Glibc
#endif
