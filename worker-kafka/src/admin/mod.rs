//! Admin calls the worker and its tests need, split as franz-go's `kadm` is: topics (create, end
//! offsets, lag), configs (group configs, the delivery-count limit), renewal (whether locks can be
//! renewed), broker_dlq (the broker's own dead-letter queue, KIP-1191), features (finalized feature
//! levels) and groups (describe, members, share-group offsets).
//!
//! Requests are encoded with `kafka-protocol` (our own data). Responses come from the network, so
//! each is decoded by hand with the bounded [`Reader`](super::wire::Reader): every length is checked
//! against the bytes present before anything is reserved, and a response that does not decode is an
//! [`ErrorKind::Protocol`] error naming the API and the broker. Each API is pinned to versions whose
//! encoding is flexible (compact) and that every Kafka 4.2+ broker offers.

mod backlog;
mod broker_dlq;
mod configs;
mod features;
mod groups;
mod renewal;
mod topics;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;

use super::cluster::Cluster;
use super::connection::{ConnectOptions, Connection};
use super::error_codes as codes;
use crate::security::{Prepared, Security};
use crate::{Error, ErrorKind, Result};

pub use broker_dlq::{BrokerDlq, DlqTopicState};
pub use configs::{DeliveryLimit, DeliveryLimitSource};
pub use groups::{LagSource, PartitionOffsets, ShareGroupDescription, ShareGroupMember};
pub use renewal::GroupRenewal;

#[cfg(any(test, feature = "test-util"))]
pub(crate) use configs::{decode_describe_configs, decode_incremental_alter_configs};
#[cfg(test)]
pub(crate) use features::decode_finalized_features;
#[cfg(any(test, feature = "test-util"))]
pub(crate) use groups::{decode_share_group_describe, decode_share_group_offsets};
#[cfg(any(test, feature = "test-util"))]
pub(crate) use topics::{decode_create_topics, decode_list_offsets};

/// Valid responses of every admin API at every version we accept, for the fuzz-style tests.
#[cfg(test)]
pub(crate) fn sample_responses() -> anyhow::Result<Vec<Vec<u8>>> {
    fn bytes<T: Encodable>(msg: &T, version: i16) -> anyhow::Result<Vec<u8>> {
        let mut buf = BytesMut::new();
        msg.encode(&mut buf, version)?;
        Ok(buf.to_vec())
    }
    let mut out = Vec::new();
    for v in CREATE_TOPICS.versions.0..=CREATE_TOPICS.versions.1 {
        out.push(bytes(&topics::tests::crate_create_topics(), v)?);
    }
    for v in LIST_OFFSETS.versions.0..=LIST_OFFSETS.versions.1 {
        out.push(bytes(&topics::tests::crate_list_offsets(), v)?);
    }
    out.push(bytes(&configs::tests::crate_describe_configs(), 4)?);
    out.push(bytes(
        &configs::tests::crate_incremental_alter_configs(),
        1,
    )?);
    out.push(bytes(&groups::tests::crate_share_group_describe(), 1)?);
    out.push(bytes(&groups::tests::crate_share_group_offsets(), 0)?);
    out.push(groups::tests::share_group_offsets_v1().to_vec());
    out.push(bytes(
        &features::tests::crate_api_versions(&[("share.version", 2)]),
        3,
    )?);
    Ok(out)
}

/// One admin API: its key, its name for messages and the versions we speak.
#[derive(Debug, Clone, Copy)]
struct Api {
    key: i16,
    name: &'static str,
    versions: (i16, i16),
}

/// CreateTopics: v5 is the first flexible version, v7 adds the topic id.
const CREATE_TOPICS: Api = Api {
    key: 19,
    name: "CreateTopics",
    versions: (5, 7),
};
/// ListOffsets: v6 is the first flexible version; v6–v10 responses are identical.
const LIST_OFFSETS: Api = Api {
    key: 2,
    name: "ListOffsets",
    versions: (6, 10),
};
/// DescribeConfigs: v4 is the only flexible version.
const DESCRIBE_CONFIGS: Api = Api {
    key: 32,
    name: "DescribeConfigs",
    versions: (4, 4),
};
/// IncrementalAlterConfigs: v1 is the only flexible version.
const INCREMENTAL_ALTER_CONFIGS: Api = Api {
    key: 44,
    name: "IncrementalAlterConfigs",
    versions: (1, 1),
};
/// ShareGroupDescribe: v1 is the only version (flexible).
const SHARE_GROUP_DESCRIBE: Api = Api {
    key: 77,
    name: "ShareGroupDescribe",
    versions: (1, 1),
};
/// DescribeShareGroupOffsets: v1 adds Lag to the response; both are flexible.
const DESCRIBE_SHARE_GROUP_OFFSETS: Api = Api {
    key: 90,
    name: "DescribeShareGroupOffsets",
    versions: (0, 1),
};

/// ConfigResource type GROUP.
const RESOURCE_GROUP: i8 = 32;
/// ConfigResource type BROKER.
const RESOURCE_BROKER: i8 = 4;

/// Administrative calls against a share-group cluster.
#[derive(Debug)]
pub struct Admin {
    cluster: Cluster,
}

/// Encodes a request with `kafka-protocol` at `version`.
fn encode<T: Encodable>(msg: &T, version: i16) -> Result<BytesMut> {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .map_err(|e| Error::new(ErrorKind::Protocol, format!("cannot encode request: {e}")))?;
    Ok(buf)
}

/// A broker's error code for `what` as an error: authorization failures are
/// [`ErrorKind::Authorization`], the rest [`ErrorKind::Broker`]. The message names the code.
fn broker_error(what: &str, code: i16, message: Option<&str>) -> Error {
    let kind = if codes::is_authorization(code) {
        ErrorKind::Authorization
    } else {
        ErrorKind::Broker
    };
    Error::new(
        kind,
        format!(
            "{what} failed with error {}{}",
            codes::describe(code),
            message
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    )
}

/// A response of `api` from `broker` that breaks the protocol (answers for something else, leaves
/// out what was asked).
fn protocol_error(api: Api, broker: &str, what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("{} response from broker {broker}: {what}", api.name),
    )
}

/// Sends one request of `api` on `conn` at the highest version both sides speak and decodes the
/// answer. `body` encodes the request for the chosen version; `decode` reads the response body of
/// that version. A decoding error names the API and the broker.
async fn call<T>(
    conn: &mut Connection,
    api: Api,
    body: impl FnOnce(i16) -> Result<BytesMut>,
    decode: impl FnOnce(Bytes, i16) -> Result<T>,
) -> Result<T> {
    let version = conn.version(api.key, api.versions)?;
    let request = body(version)?;
    let response = conn
        .call(api.key, version, &request, Duration::ZERO)
        .await?;
    decode(response, version).map_err(|e| protocol_error(api, conn.addr(), e.message()))
}

impl Admin {
    /// Connects to `bootstrap` (comma-separated `host:port` list) over plain TCP.
    pub async fn connect(bootstrap: impl Into<String>) -> Result<Self> {
        Self::connect_with(bootstrap, &Security::plaintext()).await
    }

    /// Connects to `bootstrap` (comma-separated `host:port` list), secured by `security`.
    pub async fn connect_with(bootstrap: impl Into<String>, security: &Security) -> Result<Self> {
        let bootstrap: Vec<String> = bootstrap
            .into()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                "admin bootstrap: expected at least one host:port",
            ));
        }
        let cluster = Cluster::new(
            bootstrap,
            ConnectOptions {
                client_id: "share-worker-admin".into(),
                // Admin answers are small; a cap keeps what a lying one can make us hold small.
                max_frame: 8 * 1024 * 1024,
                request_timeout: Duration::from_secs(30),
                security: Prepared::new(security)?,
            },
        );
        drop(cluster.connect_any().await?);
        Ok(Self { cluster })
    }

    /// The version range a broker offers for the API `api_key` (from its ApiVersions answer), `None`
    /// when it does not offer that API at all.
    pub async fn offered_versions(&self, api_key: i16) -> Result<Option<(i16, i16)>> {
        Ok(self.cluster.connect_any().await?.offered(api_key))
    }

    /// Fails with [`ErrorKind::Unsupported`] unless the broker offers ShareFetch and
    /// ShareAcknowledge v2: share groups with RENEW and `record_limit` need Kafka 4.2+.
    pub async fn require_share_groups(&self) -> Result<()> {
        self.cluster.connect_any().await?.require_share_v2()
    }

    /// The broker that coordinates `group`: its node id and address (FindCoordinator, key type
    /// GROUP).
    ///
    /// A cluster that has just started has no coordinator yet (its internal topics are being
    /// created), nor has one whose coordinator just died: that answer is retried with backoff for
    /// up to the request timeout.
    pub async fn group_coordinator(&self, group: &str) -> Result<(i32, String)> {
        let mut patience = Patience::new(self.cluster.options.request_timeout);
        loop {
            let c = self.cluster.find_coordinator(group).await?;
            if c.error_code == codes::NONE {
                return Ok((c.node_id, c.addr));
            }
            if !patience.wait_if_not_ready(c.error_code).await {
                return Err(broker_error(
                    &format!("finding the coordinator of group {group}"),
                    c.error_code,
                    c.error_message.as_deref(),
                ));
            }
        }
    }

    /// A connection to `group`'s coordinator.
    async fn coordinator(&self, group: &str) -> Result<Connection> {
        let (_, addr) = self.group_coordinator(group).await?;
        Connection::connect(&addr, &self.cluster.options).await
    }
}

/// Waits out a coordinator that is not ready yet (a cluster just started, a coordinator moving
/// or loading its state), with backoff, for a bounded time.
struct Patience {
    deadline: tokio::time::Instant,
    backoff: Duration,
}

impl Patience {
    fn new(limit: Duration) -> Self {
        Self {
            deadline: tokio::time::Instant::now() + limit,
            backoff: Duration::from_millis(100),
        }
    }

    /// `true` (after a pause) when `code` says the coordinator is not ready and there is time
    /// left to wait for it; `false` when the answer should be returned as it is.
    async fn wait_if_not_ready(&mut self, code: i16) -> bool {
        let not_ready = matches!(
            code,
            codes::COORDINATOR_NOT_AVAILABLE
                | codes::COORDINATOR_LOAD_IN_PROGRESS
                | codes::NOT_COORDINATOR
        );
        not_ready && self.pause().await
    }

    /// [`wait_if_not_ready`](Self::wait_if_not_ready) for a partition's code in a coordinator's
    /// answer, which also says the partition's state is moving (its share coordinator changes
    /// with the leader of its `__share_group_state` partition, after a broker died).
    async fn wait_if_moving(&mut self, code: i16) -> bool {
        if matches!(code, codes::NOT_LEADER_OR_FOLLOWER) {
            return self.pause().await;
        }
        self.wait_if_not_ready(code).await
    }

    /// `true` after a pause when there is time left for one; `false` at once when there is not.
    async fn pause(&mut self) -> bool {
        if tokio::time::Instant::now() + self.backoff > self.deadline {
            return false;
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(1));
        true
    }
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::wire::{put_compact_len, put_empty_tags, put_uvarint};

    type BrokerError = Box<dyn std::error::Error + Send + Sync>;

    /// A partition whose share state is moving (NOT_LEADER_OR_FOLLOWER) is waited out like a
    /// coordinator that is not ready, with growing pauses, until the time is up; any other
    /// partition error is returned at once.
    #[tokio::test(start_paused = true)]
    async fn a_moving_partition_is_waited_out_within_the_time_given() {
        let started = tokio::time::Instant::now();
        let mut patience = Patience::new(Duration::from_secs(3));
        assert!(
            !patience
                .wait_if_moving(codes::UNKNOWN_TOPIC_OR_PARTITION)
                .await
        );
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no pause for other errors"
        );
        let mut pauses = 0;
        while patience.wait_if_moving(codes::NOT_LEADER_OR_FOLLOWER).await {
            pauses += 1;
        }
        // 0.1 + 0.2 + 0.4 + 0.8 + 1 s: the next 1 s pause would pass the 3 s given.
        assert_eq!(pauses, 5);
        assert_eq!(started.elapsed(), Duration::from_millis(2500));
        assert!(
            !patience
                .wait_if_moving(codes::COORDINATOR_LOAD_IN_PROGRESS)
                .await
        );
    }

    /// A one-connection fake broker that offers DescribeConfigs v4, then answers the next request
    /// with `body` (after a flexible response header).
    async fn lying_broker(body: Vec<u8>) -> std::io::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await?;
            async fn correlation(s: &mut tokio::net::TcpStream) -> Result<i32, BrokerError> {
                let size = usize::try_from(s.read_i32().await?)?;
                let mut buf = vec![0u8; size];
                s.read_exact(&mut buf).await?;
                let id: [u8; 4] = buf.get(4..8).ok_or("short request")?.try_into()?;
                Ok(i32::from_be_bytes(id))
            }
            let id = correlation(&mut s).await?;
            let mut versions = BytesMut::new();
            versions.put_i32(id);
            versions.put_i16(0);
            put_compact_len(&mut versions, 1);
            versions.put_i16(DESCRIBE_CONFIGS.key);
            versions.put_i16(1);
            versions.put_i16(4);
            put_empty_tags(&mut versions);
            versions.put_i32(0);
            put_empty_tags(&mut versions);
            s.write_i32(i32::try_from(versions.len())?).await?;
            s.write_all(&versions).await?;
            let id = correlation(&mut s).await?;
            let mut frame = BytesMut::new();
            frame.put_i32(id);
            put_empty_tags(&mut frame);
            frame.put_slice(&body);
            s.write_i32(i32::try_from(frame.len())?).await?;
            s.write_all(&frame).await?;
            let _ = s.read_u8().await;
            Ok::<(), BrokerError>(())
        });
        Ok(addr)
    }

    /// A response claiming 2^32 - 2 results in a few bytes is a Protocol error naming the API and
    /// the broker, not an allocation.
    #[tokio::test]
    async fn a_lying_response_is_a_protocol_error_naming_api_and_broker()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        let mut body = BytesMut::new();
        body.put_i32(0);
        put_uvarint(&mut body, u32::MAX);
        body.put_slice(&[0; 8]);
        let addr = lying_broker(body.to_vec()).await?;
        let options = ConnectOptions {
            client_id: "test".into(),
            max_frame: 1024,
            request_timeout: Duration::from_secs(5),
            security: crate::security::Prepared::default(),
        };
        let mut conn = Connection::connect(&addr, &options).await?;
        let err = call(
            &mut conn,
            DESCRIBE_CONFIGS,
            |_| Ok(BytesMut::new()),
            |body, _| configs::decode_describe_configs(body),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        let expected = format!("DescribeConfigs response from broker {addr}");
        assert!(err.message().contains(&expected), "{err}");
        assert!(err.message().contains("array of"), "{err}");
        Ok(())
    }
}
