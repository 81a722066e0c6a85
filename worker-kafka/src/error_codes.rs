//! Kafka protocol error codes by name (as franz-go's `kerr` does), so no bare numbers stand in the
//! code. Only the codes this client acts on or reports are listed; [`name`] gives the protocol name
//! of each for error messages.

/// No error.
pub(crate) const NONE: i16 = 0;
/// The topic or partition does not exist on this broker.
pub(crate) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// This broker is not the partition's leader.
pub(crate) const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// The coordinator is still loading the group.
pub(crate) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// The coordinator is not available.
pub(crate) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// This broker is not the group's coordinator.
pub(crate) const NOT_COORDINATOR: i16 = 16;
/// The group uses another protocol (classic/consumer group).
pub(crate) const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
/// The coordinator does not know the member id.
pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;
/// Not authorized for the topic.
pub(crate) const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// Not authorized for the group.
pub(crate) const GROUP_AUTHORIZATION_FAILED: i16 = 30;
/// Not authorized for the cluster.
pub(crate) const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// The broker does not support the request's version (share groups off, or too old).
pub(crate) const UNSUPPORTED_VERSION: i16 = 35;
/// CreateTopics: the topic already exists.
pub(crate) const TOPIC_ALREADY_EXISTS: i16 = 36;
/// A config name or value the broker does not accept (e.g. a group config it does not know).
pub(crate) const INVALID_CONFIG: i16 = 40;
/// The request breaks the protocol.
pub(crate) const INVALID_REQUEST: i16 = 42;
/// The broker does not offer the SASL mechanism asked for.
pub(crate) const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// A SASL request came at the wrong time.
pub(crate) const ILLEGAL_SASL_STATE: i16 = 34;
/// SASL authentication failed (bad credentials, an expired or invalid token).
pub(crate) const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// The group id is unknown, or belongs to a group of another type.
pub(crate) const GROUP_ID_NOT_FOUND: i16 = 69;
/// The leader epoch in the request is older than the broker's.
pub(crate) const FENCED_LEADER_EPOCH: i16 = 74;
/// The group has as many members as it may have.
pub(crate) const GROUP_MAX_SIZE_REACHED: i16 = 81;
/// The member epoch is stale.
pub(crate) const FENCED_MEMBER_EPOCH: i16 = 110;
/// The record's acquisition lock is gone (it expired, or the record was acknowledged already).
pub(crate) const INVALID_RECORD_STATE: i16 = 121;
/// The share session does not exist (any more).
pub(crate) const SHARE_SESSION_NOT_FOUND: i16 = 122;
/// The share session epoch is not the expected one.
pub(crate) const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
/// The broker holds as many share sessions as it may.
pub(crate) const SHARE_SESSION_LIMIT_REACHED: i16 = 133;

/// The protocol name of `code`, `None` for codes not listed here.
pub(crate) fn name(code: i16) -> Option<&'static str> {
    Some(match code {
        NONE => "NONE",
        UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
        NOT_LEADER_OR_FOLLOWER => "NOT_LEADER_OR_FOLLOWER",
        COORDINATOR_LOAD_IN_PROGRESS => "COORDINATOR_LOAD_IN_PROGRESS",
        COORDINATOR_NOT_AVAILABLE => "COORDINATOR_NOT_AVAILABLE",
        NOT_COORDINATOR => "NOT_COORDINATOR",
        INCONSISTENT_GROUP_PROTOCOL => "INCONSISTENT_GROUP_PROTOCOL",
        UNKNOWN_MEMBER_ID => "UNKNOWN_MEMBER_ID",
        TOPIC_AUTHORIZATION_FAILED => "TOPIC_AUTHORIZATION_FAILED",
        GROUP_AUTHORIZATION_FAILED => "GROUP_AUTHORIZATION_FAILED",
        CLUSTER_AUTHORIZATION_FAILED => "CLUSTER_AUTHORIZATION_FAILED",
        UNSUPPORTED_VERSION => "UNSUPPORTED_VERSION",
        TOPIC_ALREADY_EXISTS => "TOPIC_ALREADY_EXISTS",
        INVALID_CONFIG => "INVALID_CONFIG",
        INVALID_REQUEST => "INVALID_REQUEST",
        UNSUPPORTED_SASL_MECHANISM => "UNSUPPORTED_SASL_MECHANISM",
        ILLEGAL_SASL_STATE => "ILLEGAL_SASL_STATE",
        SASL_AUTHENTICATION_FAILED => "SASL_AUTHENTICATION_FAILED",
        GROUP_ID_NOT_FOUND => "GROUP_ID_NOT_FOUND",
        FENCED_LEADER_EPOCH => "FENCED_LEADER_EPOCH",
        GROUP_MAX_SIZE_REACHED => "GROUP_MAX_SIZE_REACHED",
        FENCED_MEMBER_EPOCH => "FENCED_MEMBER_EPOCH",
        INVALID_RECORD_STATE => "INVALID_RECORD_STATE",
        SHARE_SESSION_NOT_FOUND => "SHARE_SESSION_NOT_FOUND",
        INVALID_SHARE_SESSION_EPOCH => "INVALID_SHARE_SESSION_EPOCH",
        SHARE_SESSION_LIMIT_REACHED => "SHARE_SESSION_LIMIT_REACHED",
        _ => return None,
    })
}

/// Whether `code` ends a share session: the next request opens a new one at epoch 0.
pub(crate) fn ends_session(code: i16) -> bool {
    matches!(
        code,
        SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH | SHARE_SESSION_LIMIT_REACHED
    )
}

/// Whether `code` says the partition is not led here any more (its leader moved, or its replicas
/// were reassigned away from this broker): refresh metadata.
pub(crate) fn leader_moved(code: i16) -> bool {
    matches!(
        code,
        NOT_LEADER_OR_FOLLOWER | FENCED_LEADER_EPOCH | UNKNOWN_TOPIC_OR_PARTITION
    )
}

/// Whether `code` refuses access (topic, group or cluster authorization).
pub(crate) fn is_authorization(code: i16) -> bool {
    matches!(
        code,
        TOPIC_AUTHORIZATION_FAILED | GROUP_AUTHORIZATION_FAILED | CLUSTER_AUTHORIZATION_FAILED
    )
}

/// The error kind a broker's `code` means to the caller when it cannot be retried: access
/// refused ([`Authorization`](crate::ErrorKind::Authorization)) or share groups unavailable
/// ([`Unsupported`](crate::ErrorKind::Unsupported)). `None` for codes worth retrying.
pub(crate) fn fatal_kind(code: i16) -> Option<crate::ErrorKind> {
    if is_authorization(code) {
        Some(crate::ErrorKind::Authorization)
    } else if code == UNSUPPORTED_VERSION {
        Some(crate::ErrorKind::Unsupported)
    } else {
        None
    }
}

/// `code` for a message: `69 (GROUP_ID_NOT_FOUND)`, or the bare number for codes not listed.
pub(crate) fn describe(code: i16) -> String {
    match name(code) {
        Some(name) => format!("{code} ({name})"),
        None => code.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_protocol_names() {
        // Spot checks against Kafka's `Errors` enum.
        assert_eq!(describe(36), "36 (TOPIC_ALREADY_EXISTS)");
        assert_eq!(describe(69), "69 (GROUP_ID_NOT_FOUND)");
        assert_eq!(describe(133), "133 (SHARE_SESSION_LIMIT_REACHED)");
        assert_eq!(describe(9999), "9999");
        assert!(is_authorization(30));
        assert!(!is_authorization(40));
    }
}
