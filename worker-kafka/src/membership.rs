//! Share-group membership: join, heartbeat and leave (ShareGroupHeartbeat) on a background task.
//!
//! The assignment in each response is the full set and applies at once. FENCED_MEMBER_EPOCH and
//! UNKNOWN_MEMBER_ID drop the assignment and rejoin at epoch 0 with the same member id; errors that
//! cannot be retried end the task with a message that says what is wrong.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::cluster::Cluster;
use super::connection::Connection;
use super::error_codes as codes;
use super::messages::{self, Heartbeat};
use crate::{Error, ErrorKind, Result};

/// Topic id → assigned partitions.
pub(crate) type Assignment = Vec<(Uuid, Vec<i32>)>;

/// What the rest of the client sees of the membership.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemberState {
    /// The member epoch; 0 while (re)joining.
    pub(crate) epoch: i32,
    /// The current assignment (empty until the first one arrives).
    pub(crate) assignment: Arc<Assignment>,
    /// Set when the membership ended with an error that cannot be retried.
    pub(crate) fatal: Option<(ErrorKind, String)>,
    /// The last error the coordinator reported that does not end the membership.
    pub(crate) warning: Option<String>,
}

/// What a member is.
#[derive(Debug, Clone)]
pub(crate) struct MemberSpec {
    pub(crate) group: String,
    pub(crate) member_id: String,
    pub(crate) topics: Vec<String>,
}

/// The error for a heartbeat answer that ends the membership, or `None` if it can be retried.
/// The message names the group, the coordinator and the broker's own words.
pub(crate) fn fatal_error(
    group: &str,
    coordinator: &str,
    code: i16,
    message: Option<&str>,
) -> Option<(ErrorKind, String)> {
    let (kind, text) = match code {
        codes::GROUP_ID_NOT_FOUND | codes::INCONSISTENT_GROUP_PROTOCOL => (
            ErrorKind::Group,
            format!(
                "group {group} is a consumer or classic group, not a share group: use another group id"
            ),
        ),
        codes::UNSUPPORTED_VERSION => (
            ErrorKind::Unsupported,
            format!(
                "the brokers do not support share groups (share groups off, or Kafka older than 4.2), so group {group} cannot be joined"
            ),
        ),
        codes::GROUP_MAX_SIZE_REACHED => (
            ErrorKind::Group,
            format!("share group {group} is full (group.share.max.size)"),
        ),
        codes::GROUP_AUTHORIZATION_FAILED => (
            ErrorKind::Authorization,
            format!("not authorized to join share group {group}"),
        ),
        codes::TOPIC_AUTHORIZATION_FAILED => (
            ErrorKind::Authorization,
            format!("share group {group}: not authorized to read (describe) its subscribed topics"),
        ),
        codes::CLUSTER_AUTHORIZATION_FAILED => (
            ErrorKind::Authorization,
            format!("share group {group}: not authorized on the cluster"),
        ),
        codes::INVALID_REQUEST => (
            ErrorKind::Group,
            format!("the coordinator rejected the heartbeat of share group {group}"),
        ),
        _ => return None,
    };
    let said = message
        .filter(|m| !m.is_empty())
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    Some((
        kind,
        format!(
            "{text} (coordinator {coordinator} answered error {}{said})",
            codes::describe(code)
        ),
    ))
}

/// The first wait before asking again while the member has no partitions.
const FIRST_UNASSIGNED_WAIT: Duration = Duration::from_millis(50);

/// How long to wait before the next heartbeat. A new group has no assignment until the broker has
/// initialised its share state, which takes a fraction of the heartbeat interval: while the member
/// has no partitions it asks again after a short wait that doubles up to the interval, so the
/// first records do not wait a whole interval (5 s by default) for the assignment.
#[derive(Debug)]
struct HeartbeatPace {
    unassigned_wait: Duration,
}

impl HeartbeatPace {
    fn new() -> Self {
        Self {
            unassigned_wait: FIRST_UNASSIGNED_WAIT,
        }
    }

    fn next(&mut self, interval: Duration, assigned: bool) -> Duration {
        if assigned {
            self.unassigned_wait = FIRST_UNASSIGNED_WAIT;
            return interval;
        }
        let wait = self.unassigned_wait.min(interval);
        self.unassigned_wait = (self.unassigned_wait * 2).min(interval.max(FIRST_UNASSIGNED_WAIT));
        wait
    }
}

/// Starts the heartbeat task. Cancelling `cancel` makes it leave the group (epoch -1) and end.
pub(crate) fn spawn(
    spec: MemberSpec,
    cluster: Arc<Cluster>,
    cancel: CancellationToken,
) -> (watch::Receiver<MemberState>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(MemberState::default());
    let task = tokio::spawn(run(spec, cluster, cancel, tx));
    (rx, task)
}

async fn heartbeat(
    conn: &mut Connection,
    spec: &MemberSpec,
    epoch: i32,
    topics: bool,
) -> Result<Heartbeat> {
    let body = messages::encode_heartbeat(
        &spec.group,
        &spec.member_id,
        epoch,
        topics.then_some(spec.topics.as_slice()),
    )?;
    let v = conn
        .version(messages::SHARE_GROUP_HEARTBEAT, (1, 1))
        .map_err(|_| {
            Error::new(
                ErrorKind::Unsupported,
                "the broker has no ShareGroupHeartbeat v1: share groups need Kafka 4.2+",
            )
        })?;
    let resp = conn
        .call(messages::SHARE_GROUP_HEARTBEAT, v, &body, Duration::ZERO)
        .await?;
    messages::decode_heartbeat(resp)
}

async fn coordinator(cluster: &Cluster, group: &str) -> Result<Connection> {
    let c = cluster.find_coordinator(group).await?;
    if c.error_code != codes::NONE {
        let kind = codes::fatal_kind(c.error_code).unwrap_or(ErrorKind::Broker);
        return Err(Error::new(
            kind,
            format!(
                "finding the coordinator of share group {group} failed with error {}{}",
                codes::describe(c.error_code),
                c.error_message
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        ));
    }
    Connection::connect(&c.addr, &cluster.options).await
}

async fn run(
    spec: MemberSpec,
    cluster: Arc<Cluster>,
    cancel: CancellationToken,
    tx: watch::Sender<MemberState>,
) {
    let mut conn: Option<Connection> = None;
    let mut epoch = 0;
    let mut send_topics = true;
    let mut backoff = Duration::from_millis(100);
    let mut pace = HeartbeatPace::new();
    while !cancel.is_cancelled() {
        let wait;
        let result = match conn.as_mut() {
            Some(c) => heartbeat(c, &spec, epoch, send_topics).await,
            None => match coordinator(&cluster, &spec.group).await {
                Ok(c) => {
                    conn = Some(c);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(hb) => match hb.error_code {
                codes::NONE => {
                    backoff = Duration::from_millis(100);
                    epoch = hb.member_epoch;
                    send_topics = false;
                    let interval = Duration::from_millis(
                        u64::try_from(hb.interval_ms.clamp(100, 60_000)).unwrap_or(5000),
                    );
                    let mut assigned = false;
                    tx.send_modify(|s| {
                        s.epoch = epoch;
                        s.warning = None;
                        if let Some(a) = hb.assignment {
                            s.assignment = Arc::new(a);
                        }
                        assigned = s.assignment.iter().any(|(_, parts)| !parts.is_empty());
                    });
                    wait = pace.next(interval, assigned);
                }
                codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR => {
                    conn = None;
                    wait = backoff;
                }
                codes::COORDINATOR_LOAD_IN_PROGRESS => wait = backoff,
                codes::UNKNOWN_MEMBER_ID | codes::FENCED_MEMBER_EPOCH => {
                    tracing::info!(group = %spec.group, code = hb.error_code, "fenced: rejoining with the same member id");
                    epoch = 0;
                    send_topics = true;
                    tx.send_modify(|s| {
                        s.epoch = 0;
                        s.assignment = Arc::new(Vec::new());
                    });
                    wait = Duration::ZERO;
                }
                code => {
                    let coordinator = conn.as_ref().map_or("?", |c| c.addr()).to_owned();
                    if let Some(fatal) =
                        fatal_error(&spec.group, &coordinator, code, hb.error_message.as_deref())
                    {
                        tracing::error!(group = %spec.group, "{}", fatal.1);
                        tx.send_modify(|s| {
                            s.fatal = Some(fatal);
                            s.assignment = Arc::new(Vec::new());
                        });
                        return;
                    }
                    let text = format!(
                        "heartbeat of group {} failed with error {code}{}",
                        spec.group,
                        hb.error_message
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    );
                    tracing::warn!("{text}");
                    tx.send_modify(|s| s.warning = Some(text));
                    wait = backoff;
                }
            },
            Err(e) => {
                if matches!(
                    e.kind(),
                    ErrorKind::Unsupported | ErrorKind::Authorization | ErrorKind::Authentication
                ) {
                    tracing::error!(group = %spec.group, "{e}");
                    tx.send_modify(|s| s.fatal = Some((e.kind(), e.to_string())));
                    return;
                }
                tracing::warn!(group = %spec.group, error = %e, "heartbeat failed; retrying");
                conn = None;
                wait = backoff;
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
    // Leave: epoch -1, after the share sessions were closed by the caller.
    if epoch > 0 {
        if conn.is_none() {
            conn = coordinator(&cluster, &spec.group).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            match heartbeat(c, &spec, -1, false).await {
                Ok(hb) if hb.error_code == codes::NONE => {}
                Ok(hb) => {
                    tracing::warn!(group = %spec.group, code = hb.error_code, "leaving the group failed")
                }
                Err(e) => {
                    tracing::warn!(group = %spec.group, error = %e, "leaving the group failed")
                }
            }
        }
    }
    tx.send_modify(|s| {
        s.epoch = -1;
        s.assignment = Arc::new(Vec::new());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unassigned_member_asks_again_soon_then_backs_off_to_the_interval() {
        let interval = Duration::from_millis(1000);
        let mut pace = HeartbeatPace::new();
        let waits: Vec<u64> = (0..7)
            .map(|_| pace.next(interval, false).as_millis() as u64)
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(pace.next(interval, true), interval);
        // Losing the assignment starts from the short wait again.
        assert_eq!(pace.next(interval, false), FIRST_UNASSIGNED_WAIT);
        // An interval shorter than the first wait is kept.
        let mut pace = HeartbeatPace::new();
        assert_eq!(
            pace.next(Duration::from_millis(20), false),
            Duration::from_millis(20)
        );
    }

    #[test]
    fn answers_that_end_the_membership_name_the_group_the_coordinator_and_the_error() {
        let (kind, text) = fatal_error(
            "sms",
            "10.0.0.1:9092",
            codes::GROUP_ID_NOT_FOUND,
            Some("Group sms is not a share group."),
        )
        .expect("fatal");
        assert_eq!(kind, ErrorKind::Group);
        for part in [
            "group sms is a consumer or classic group",
            "10.0.0.1:9092",
            "69 (GROUP_ID_NOT_FOUND)",
            "Group sms is not a share group.",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        for (code, kind) in [
            (codes::GROUP_AUTHORIZATION_FAILED, ErrorKind::Authorization),
            (codes::TOPIC_AUTHORIZATION_FAILED, ErrorKind::Authorization),
            (codes::UNSUPPORTED_VERSION, ErrorKind::Unsupported),
            (codes::GROUP_MAX_SIZE_REACHED, ErrorKind::Group),
        ] {
            assert_eq!(fatal_error("g", "b", code, None).map(|f| f.0), Some(kind));
        }
        for retried in [
            codes::NOT_COORDINATOR,
            codes::COORDINATOR_LOAD_IN_PROGRESS,
            codes::FENCED_MEMBER_EPOCH,
        ] {
            assert!(fatal_error("g", "b", retried, None).is_none());
        }
    }
}
