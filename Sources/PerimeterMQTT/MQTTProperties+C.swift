import CMosquitto

#if canImport(Glibc)
    import Glibc
#endif

/// A libmosquitto property list built from ``MQTTProperties``; frees itself.
///
/// - Important: Use only within the scope of `withCList`: the list is freed when it returns.
extension MQTTProperties {
    func withCList<R>(
        _ operation: String, _ body: (OpaquePointer?) throws(MQTTError) -> R
    ) throws(MQTTError) -> R {
        var list = try makeCList(operation)
        defer { mosquitto_property_free_all(&list) }
        return try body(list)
    }

    /// A new libmosquitto property list (nil when there is nothing to send); the caller frees it
    /// with `mosquitto_property_free_all` unless a libmosquitto call takes ownership.
    func makeCList(_ operation: String) throws(MQTTError) -> OpaquePointer? {
        if isEmpty { return nil }
        var list: OpaquePointer? = nil
        do {
            try fill(&list, operation)
        } catch {
            mosquitto_property_free_all(&list)
            throw error
        }
        return list
    }

    private func fill(_ list: inout OpaquePointer?, _ operation: String) throws(MQTTError) {
        if let messageExpiry {
            try MQTTError.check(
                mosquitto_property_add_int32(&list, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), messageExpiry),
                operation, context: "message expiry property")
        }
        if let contentType {
            try MQTTError.check(
                mosquitto_property_add_string(&list, Int32(MQTT_PROP_CONTENT_TYPE.rawValue), contentType),
                operation, context: "content type property")
        }
        if let responseTopic {
            try MQTTError.check(
                mosquitto_property_add_string(&list, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), responseTopic),
                operation, context: "response topic property")
        }
        if let correlationData {
            guard correlationData.count <= Int(UInt16.max) else {
                throw MQTTError(
                    .invalidArgument, operation: operation,
                    reason: "correlation data is \(correlationData.count) bytes; at most 65535 allowed")
            }
            let rc = correlationData.withUnsafeBytes {
                mosquitto_property_add_binary(
                    &list, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), $0.baseAddress, UInt16($0.count))
            }
            try MQTTError.check(rc, operation, context: "correlation data property")
        }
        for property in userProperties {
            try MQTTError.check(
                mosquitto_property_add_string_pair(
                    &list, Int32(MQTT_PROP_USER_PROPERTY.rawValue), property.name, property.value),
                operation, context: "user property '\(property.name)'")
        }
    }

    /// Copies the properties Perimeter knows out of a libmosquitto list (owned by libmosquitto).
    init(cList: OpaquePointer?) {
        self.init()
        guard let cList else { return }
        var int32: UInt32 = 0
        if mosquitto_property_read_int32(cList, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), &int32, false)
            != nil
        {
            messageExpiry = int32
        }
        var string: UnsafeMutablePointer<CChar>? = nil
        if mosquitto_property_read_string(cList, Int32(MQTT_PROP_CONTENT_TYPE.rawValue), &string, false) != nil,
            let string
        {
            contentType = String(cString: string)
            free(string)
        }
        string = nil
        if mosquitto_property_read_string(cList, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), &string, false) != nil,
            let string
        {
            responseTopic = String(cString: string)
            free(string)
        }
        var binary: UnsafeMutableRawPointer? = nil
        var length: UInt16 = 0
        if mosquitto_property_read_binary(
            cList, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &binary, &length, false) != nil
        {
            if let binary {
                correlationData = Array(UnsafeRawBufferPointer(start: binary, count: Int(length)))
                free(binary)
            } else {
                correlationData = []
            }
        }
        var name: UnsafeMutablePointer<CChar>? = nil
        var value: UnsafeMutablePointer<CChar>? = nil
        var cursor = mosquitto_property_read_string_pair(
            cList, Int32(MQTT_PROP_USER_PROPERTY.rawValue), &name, &value, false)
        while let current = cursor {
            if let name, let value {
                userProperties.append(UserProperty(String(cString: name), String(cString: value)))
            }
            free(name)
            free(value)
            name = nil
            value = nil
            cursor = mosquitto_property_read_string_pair(
                current, Int32(MQTT_PROP_USER_PROPERTY.rawValue), &name, &value, true)
        }
    }
}
