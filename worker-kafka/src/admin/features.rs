//! The cluster's finalized feature levels (`share.version`, `metadata.version`, ...), from a
//! broker's ApiVersions answer.
//!
//! ApiVersions v3+ carries them in tagged field 2 (`FinalizedFeatures`: name, max level, min
//! level). Kafka 4.4 writes dead letters for share groups only at `share.version` 2 or above, and
//! a cluster upgraded from 4.2 or 4.3 keeps its old level until an operator raises it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::{Admin, protocol_error};
use crate::wire::{Reader, put_compact_string, put_empty_tags};
use crate::{Error, ErrorKind, Result};

/// ApiVersions: v3 is the first flexible version and the first with the feature tags.
const API_VERSIONS_KEY: i16 = 18;
const API_VERSIONS_VERSION: i16 = 3;
/// The tagged field of an ApiVersions response holding the finalized features.
const FINALIZED_FEATURES_TAG: u32 = 2;

/// One finalized feature: its name and level (the max level, which is the one in force).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FinalizedFeature {
    pub(crate) name: String,
    pub(crate) level: i16,
}

/// Decodes the finalized features of an ApiVersions v3+ response body. A response without them (a
/// broker that finalized none) gives an empty list; an error code is an error.
pub(crate) fn decode_finalized_features(body: Bytes) -> Result<Vec<FinalizedFeature>> {
    let mut r = Reader::new(body);
    let error = r.i16()?;
    if error != 0 {
        return Err(Error::new(
            ErrorKind::Broker,
            format!("ApiVersions failed with error {error}"),
        ));
    }
    // ApiKey: key, min, max, tags.
    for _ in 0..r.compact_array_len(7)? {
        let _key = r.i16()?;
        let _min = r.i16()?;
        let _max = r.i16()?;
        r.skip_tags()?;
    }
    let _throttle = r.i32()?;
    let mut features = Vec::new();
    for _ in 0..r.uvarint()? {
        let tag = r.uvarint()?;
        let size = r.uvarint()? as usize;
        let field = r.bytes(size)?;
        if tag != FINALIZED_FEATURES_TAG {
            continue;
        }
        let mut f = Reader::new(field);
        // FinalizedFeatureKey: name, max level, min level, tags.
        for _ in 0..f.compact_array_len(6)? {
            let name = f.compact_string()?;
            let level = f.i16()?;
            let _min = f.i16()?;
            f.skip_tags()?;
            features.push(FinalizedFeature { name, level });
        }
        f.finish()?;
    }
    r.finish()?;
    Ok(features)
}

impl Admin {
    /// The level at which broker `node_id` says the cluster has finalized feature `name`
    /// (`share.version`, say), `None` when it names no such feature. Also returns the broker's
    /// address.
    pub(crate) async fn finalized_feature(
        &self,
        node_id: i32,
        name: &str,
    ) -> Result<(Option<i16>, String)> {
        let mut conn = self.cluster.connect_node(node_id).await?;
        let mut body = BytesMut::new();
        put_compact_string(&mut body, Some("share-worker"));
        put_compact_string(&mut body, Some(env!("CARGO_PKG_VERSION")));
        put_empty_tags(&mut body);
        let response = conn
            .call(
                API_VERSIONS_KEY,
                API_VERSIONS_VERSION,
                &body,
                Duration::ZERO,
            )
            .await?;
        let addr = conn.addr().to_owned();
        let features = decode_finalized_features(response).map_err(|e| {
            protocol_error(
                super::Api {
                    key: API_VERSIONS_KEY,
                    name: "ApiVersions",
                    versions: (API_VERSIONS_VERSION, API_VERSIONS_VERSION),
                },
                &addr,
                e.message(),
            )
        })?;
        let level = features
            .into_iter()
            .find(|f| f.name == name)
            .map(|f| f.level);
        Ok((level, addr))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use bytes::BufMut;
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    /// An ApiVersions answer as the crate encodes it, with `features` finalized.
    pub(crate) fn crate_api_versions(features: &[(&'static str, i16)]) -> ApiVersionsResponse {
        let mut resp = ApiVersionsResponse::default();
        let mut api = ApiVersion::default();
        api.api_key = 78;
        api.min_version = 1;
        api.max_version = 2;
        resp.api_keys = vec![api];
        resp.finalized_features_epoch = 7;
        resp.finalized_features = features
            .iter()
            .map(|(name, level)| {
                let mut f = FinalizedFeatureKey::default();
                f.name = StrBytes::from_static_str(name);
                f.max_version_level = *level;
                f.min_version_level = 0;
                f
            })
            .collect();
        resp
    }

    #[test]
    fn finalized_features_decode_like_the_crate()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        for version in [3, 4] {
            let mut buf = BytesMut::new();
            crate_api_versions(&[("metadata.version", 29), ("share.version", 2)])
                .encode(&mut buf, version)?;
            assert_eq!(
                decode_finalized_features(buf.freeze())?,
                [
                    FinalizedFeature {
                        name: "metadata.version".into(),
                        level: 29
                    },
                    FinalizedFeature {
                        name: "share.version".into(),
                        level: 2
                    }
                ]
            );
        }
        let mut none = BytesMut::new();
        crate_api_versions(&[]).encode(&mut none, 3)?;
        assert_eq!(decode_finalized_features(none.freeze())?, []);
        Ok(())
    }

    #[test]
    fn a_feature_list_that_lies_is_an_error() -> std::result::Result<(), Box<dyn std::error::Error>>
    {
        let mut buf = BytesMut::new();
        buf.put_i16(0);
        buf.put_u8(1); // no api keys
        buf.put_i32(0);
        buf.put_u8(1); // one tagged field
        buf.put_u8(2); // tag 2
        buf.put_u8(3); // of 3 bytes
        buf.put_u8(0xff); // claiming a huge array
        buf.put_u8(0xff);
        buf.put_u8(0x0f);
        assert!(decode_finalized_features(buf.freeze()).is_err());
        let mut refused = BytesMut::new();
        refused.put_i16(35);
        assert!(decode_finalized_features(refused.freeze()).is_err());
        Ok(())
    }
}
