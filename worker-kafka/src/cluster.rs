//! Bootstrap, broker endpoints and control-plane calls (Metadata, FindCoordinator).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::Mutex as AsyncMutex;

use super::connection::{ConnectOptions, Connection};
use super::messages::{self, Coordinator, Metadata};
use crate::{Error, ErrorKind, Result};

/// What the client knows about the cluster, and one spare connection for control calls.
#[derive(Debug)]
pub(crate) struct Cluster {
    bootstrap: Vec<String>,
    pub(crate) options: ConnectOptions,
    brokers: Mutex<HashMap<i32, String>>,
    control: AsyncMutex<Option<Connection>>,
}

impl Cluster {
    pub(crate) fn new(bootstrap: Vec<String>, options: ConnectOptions) -> Self {
        Self {
            bootstrap,
            options,
            brokers: Mutex::new(HashMap::new()),
            control: AsyncMutex::new(None),
        }
    }

    /// The address of broker `node`, if known.
    pub(crate) fn broker_addr(&self, node: i32) -> Option<String> {
        self.brokers.lock().ok()?.get(&node).cloned()
    }

    /// Records an endpoint learnt from a response.
    pub(crate) fn learn_broker(&self, node: i32, addr: String) {
        if let Ok(mut b) = self.brokers.lock() {
            b.insert(node, addr);
        }
    }

    /// Connects to any reachable broker: bootstrap addresses first, then known brokers.
    pub(crate) async fn connect_any(&self) -> Result<Connection> {
        let mut addrs = self.bootstrap.clone();
        if let Ok(b) = self.brokers.lock() {
            addrs.extend(b.values().cloned());
        }
        let mut last = None;
        for addr in addrs {
            match Connection::connect(&addr, &self.options).await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::new(ErrorKind::Config, "no bootstrap servers")))
    }

    /// Connects to broker `node`.
    pub(crate) async fn connect_node(&self, node: i32) -> Result<Connection> {
        let addr = self.broker_addr(node).ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("no endpoint known for broker {node}"),
            )
        })?;
        Connection::connect(&addr, &self.options).await
    }

    /// Runs one control call on the spare connection, reconnecting if it is missing or broken.
    ///
    /// Control calls (Metadata, FindCoordinator) only read, so one that fails on a connection
    /// opened earlier (its broker may have died since) is sent once more on a fresh connection to
    /// any reachable broker: a dead bootstrap broker is not an error while another answers.
    pub(crate) async fn control_call(
        &self,
        api_key: i16,
        ours: (i16, i16),
        body: &[u8],
    ) -> Result<bytes::Bytes> {
        let mut guard = self.control.lock().await;
        loop {
            let fresh = guard.as_ref().is_none_or(Connection::is_broken);
            if fresh {
                *guard = Some(self.connect_any().await?);
            }
            let conn = guard
                .as_mut()
                .ok_or_else(|| Error::new(ErrorKind::Io, "no control connection"))?;
            let version = conn.version(api_key, ours)?;
            let result = conn
                .call(api_key, version, body, std::time::Duration::ZERO)
                .await;
            match result {
                Err(err) => {
                    *guard = None;
                    if fresh || err.kind() != ErrorKind::Io {
                        return Err(err);
                    }
                }
                ok => return ok,
            }
        }
    }

    /// Fetches metadata for `topics` and remembers the broker endpoints.
    pub(crate) async fn metadata(&self, topics: &[String]) -> Result<Metadata> {
        let body = messages::encode_metadata(topics)?;
        let v = messages::METADATA_VERSION;
        let resp = self.control_call(messages::METADATA, (v, v), &body).await?;
        let meta = messages::decode_metadata(resp)?;
        if let Ok(mut b) = self.brokers.lock() {
            for (node, addr) in &meta.brokers {
                b.insert(*node, addr.clone());
            }
        }
        Ok(meta)
    }

    /// Finds the coordinator of `group` (key type 0, GROUP).
    pub(crate) async fn find_coordinator(&self, group: &str) -> Result<Coordinator> {
        let body = messages::encode_find_coordinator(0, group);
        let resp = self
            .control_call(messages::FIND_COORDINATOR, (4, 6), &body)
            .await?;
        let c = messages::decode_find_coordinator(resp)?;
        if c.error_code == 0 {
            self.learn_broker(c.node_id, c.addr.clone());
        }
        Ok(c)
    }
}
