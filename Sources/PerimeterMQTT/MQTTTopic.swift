import CMosquitto

/// Topic-name and topic-filter rules, answered by libmosquitto rather than a hand-written matcher.
public enum MQTTTopic {
    /// True when `topic` matches the subscription `filter` (`+` and `#` wildcards).
    public static func matches(filter: String, topic: String) -> Bool {
        var result = false
        let rc = mosquitto_topic_matches_sub(filter, topic, &result)
        return rc == Int32(MOSQ_ERR_SUCCESS.rawValue) && result
    }

    /// Throws when `topic` is not a valid topic to publish to (empty, wildcards, bad UTF-8, too long).
    public static func validateName(_ topic: String) throws(MQTTError) {
        try MQTTError.check(mosquitto_pub_topic_check(topic), "mosquitto_pub_topic_check", context: "topic '\(topic)'")
        try MQTTError.check(
            mosquitto_validate_utf8(topic, Int32(topic.utf8.count)), "mosquitto_validate_utf8",
            context: "topic '\(topic)'")
    }

    /// Throws when `filter` is not a valid subscription filter.
    public static func validateFilter(_ filter: String) throws(MQTTError) {
        try MQTTError.check(
            mosquitto_sub_topic_check(filter), "mosquitto_sub_topic_check", context: "filter '\(filter)'")
    }
}
