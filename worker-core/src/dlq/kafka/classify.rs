//! What a failed dead-letter write means: a pure function from librdkafka's error code (broker
//! codes and librdkafka's own, negative ones) to what the sink does next.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// What the sink does with a failed write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// The letter is larger than the producer or the topic accepts: cut it and write it again.
    TooLarge,
    /// The write is not allowed (authorization, authentication): it will not pass by itself.
    Denied,
    /// The broker says the topic name is invalid: it will not pass by itself.
    InvalidTopic,
    /// The topic or the producer refuses this letter for good (a policy, a record the topic
    /// cannot take, a producer in a fatal state).
    Refused,
    /// The topic may not exist (an unknown topic, or a write that timed out): ask the cluster.
    MaybeMissing,
    /// Anything else (a broker down or slow, a leader moving, a full queue): it may pass by itself.
    Transient,
}

impl Class {
    /// Whether no retry of the same write can succeed.
    pub(super) fn is_permanent(self) -> bool {
        matches!(self, Class::Denied | Class::InvalidTopic | Class::Refused)
    }
}

/// The class of an rdkafka error; errors that carry no code may pass by themselves.
pub(super) fn classify_error(error: &KafkaError) -> Class {
    error
        .rdkafka_error_code()
        .map_or(Class::Transient, classify)
}

/// The class of one error code.
pub(super) fn classify(code: RDKafkaErrorCode) -> Class {
    use RDKafkaErrorCode as C;
    match code {
        // Local (message.max.bytes of the producer) and broker MESSAGE_TOO_LARGE share code 10;
        // RECORD_LIST_TOO_LARGE is 18.
        C::MessageSizeTooLarge | C::MessageBatchTooLarge => Class::TooLarge,
        C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::DelegationTokenAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication
        | C::UnsupportedSASLMechanism => Class::Denied,
        C::InvalidTopic => Class::InvalidTopic,
        C::Fatal
        | C::PolicyViolation
        | C::InvalidRecord
        | C::InvalidTimestamp
        | C::InvalidRequiredAcks
        | C::UnsupportedForMessageFormat => Class::Refused,
        C::UnknownTopic
        | C::UnknownTopicOrPartition
        | C::UnknownTopicId
        | C::MessageTimedOut
        | C::RequestTimedOut
        | C::OperationTimedOut
        | C::TimedOutQueue => Class::MaybeMissing,
        _ => Class::Transient,
    }
}

/// What the cluster's metadata says of a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TopicState {
    /// It exists.
    Exists,
    /// It does not exist.
    Missing,
    /// The broker answered for it with this error.
    Error(RDKafkaErrorCode),
}

/// The state of a topic from the error its metadata carries.
pub(super) fn topic_state(error: Option<RDKafkaErrorCode>) -> TopicState {
    match error {
        None | Some(RDKafkaErrorCode::NoError) => TopicState::Exists,
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownTopicId,
        ) => TopicState::Missing,
        Some(code) => TopicState::Error(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    #[test]
    fn every_code_has_its_class() {
        let table = [
            (C::MessageSizeTooLarge, Class::TooLarge),
            (C::MessageBatchTooLarge, Class::TooLarge),
            (C::TopicAuthorizationFailed, Class::Denied),
            (C::ClusterAuthorizationFailed, Class::Denied),
            (C::GroupAuthorizationFailed, Class::Denied),
            (C::TransactionalIdAuthorizationFailed, Class::Denied),
            (C::DelegationTokenAuthorizationFailed, Class::Denied),
            (C::SaslAuthenticationFailed, Class::Denied),
            (C::Authentication, Class::Denied),
            (C::UnsupportedSASLMechanism, Class::Denied),
            (C::InvalidTopic, Class::InvalidTopic),
            (C::Fatal, Class::Refused),
            (C::PolicyViolation, Class::Refused),
            (C::InvalidRecord, Class::Refused),
            (C::InvalidTimestamp, Class::Refused),
            (C::InvalidRequiredAcks, Class::Refused),
            (C::UnsupportedForMessageFormat, Class::Refused),
            (C::UnknownTopic, Class::MaybeMissing),
            (C::UnknownTopicOrPartition, Class::MaybeMissing),
            (C::UnknownTopicId, Class::MaybeMissing),
            (C::MessageTimedOut, Class::MaybeMissing),
            (C::RequestTimedOut, Class::MaybeMissing),
            (C::OperationTimedOut, Class::MaybeMissing),
            (C::TimedOutQueue, Class::MaybeMissing),
            (C::BrokerTransportFailure, Class::Transient),
            (C::AllBrokersDown, Class::Transient),
            (C::Resolve, Class::Transient),
            (C::QueueFull, Class::Transient),
            (C::NotEnoughReplicas, Class::Transient),
            (C::NotEnoughReplicasAfterAppend, Class::Transient),
            (C::NotLeaderForPartition, Class::Transient),
            (C::LeaderNotAvailable, Class::Transient),
            (C::BrokerNotAvailable, Class::Transient),
            (C::NetworkException, Class::Transient),
            (C::KafkaStorageError, Class::Transient),
            (C::ThrottlingQuotaExceeded, Class::Transient),
            (C::OutOfOrderSequenceNumber, Class::Transient),
            (C::Unknown, Class::Transient),
        ];
        for (code, class) in table {
            assert_eq!(classify(code), class, "{code:?}");
            assert_eq!(
                classify_error(&KafkaError::MessageProduction(code)),
                class,
                "{code:?}"
            );
        }
    }

    #[test]
    fn only_refusals_are_permanent() {
        for (class, permanent) in [
            (Class::TooLarge, false),
            (Class::Denied, true),
            (Class::InvalidTopic, true),
            (Class::Refused, true),
            (Class::MaybeMissing, false),
            (Class::Transient, false),
        ] {
            assert_eq!(class.is_permanent(), permanent, "{class:?}");
        }
    }

    #[test]
    fn errors_without_a_code_may_pass() {
        assert_eq!(classify_error(&KafkaError::Canceled), Class::Transient);
        assert_eq!(
            classify_error(&KafkaError::NoMessageReceived),
            Class::Transient
        );
    }

    #[test]
    fn metadata_says_whether_a_topic_exists() {
        assert_eq!(topic_state(None), TopicState::Exists);
        assert_eq!(topic_state(Some(C::NoError)), TopicState::Exists);
        assert_eq!(
            topic_state(Some(C::UnknownTopicOrPartition)),
            TopicState::Missing
        );
        assert_eq!(topic_state(Some(C::UnknownTopic)), TopicState::Missing);
        assert_eq!(
            topic_state(Some(C::TopicAuthorizationFailed)),
            TopicState::Error(C::TopicAuthorizationFailed)
        );
        assert_eq!(
            topic_state(Some(C::LeaderNotAvailable)),
            TopicState::Error(C::LeaderNotAvailable)
        );
    }
}
