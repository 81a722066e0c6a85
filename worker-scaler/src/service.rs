//! KEDA's External Scaler service over the backlogs.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::backlog::{Backlogs, Failure, Reading};
use crate::metadata::Query;
use crate::proto::external_scaler_server::ExternalScaler;
use crate::proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};

/// The response header that flags a value as the last one read (its age in seconds): the cluster
/// did not answer within the bound.
pub const STALE_HEADER: &str = "x-share-scaler-stale-seconds";
/// How often a `StreamIsActive` stream reads the backlog.
const STREAM_EVERY: Duration = Duration::from_secs(1);

/// The scaler: answers KEDA from the backlogs it reads.
#[derive(Clone, Debug)]
pub struct Scaler {
    backlogs: Arc<Backlogs>,
    /// Fired when the server shuts down: open streams end, so the shutdown does not wait for
    /// KEDA to close them.
    pub(crate) stopping: CancellationToken,
}

impl Scaler {
    pub(crate) fn new(backlogs: Backlogs) -> Self {
        Self {
            backlogs: Arc::new(backlogs),
            stopping: CancellationToken::new(),
        }
    }

    /// The query of `object`, and its backlog now.
    async fn backlog(&self, object: Option<&ScaledObjectRef>) -> Result<(Query, Reading), Status> {
        let object = object.ok_or_else(|| Status::invalid_argument("no scaled object"))?;
        let query = Query::parse(&object.scaler_metadata).map_err(|why| {
            Status::invalid_argument(format!(
                "scaled object {}/{}: {why}",
                object.namespace, object.name
            ))
        })?;
        let reading = self
            .backlogs
            .read(&query)
            .await
            .map_err(|failure| match failure {
                Failure::NotFound(why) => Status::not_found(why),
                Failure::Denied(why) => Status::permission_denied(why),
                Failure::Unavailable(why) => Status::unavailable(why),
            })?;
        Ok((query, reading))
    }
}

/// `message` as a response, flagged when `reading` is stale.
fn answer<T>(message: T, reading: Reading) -> Response<T> {
    let mut response = Response::new(message);
    if let Some(age) = reading.stale_for
        && let Ok(value) = age.as_secs().to_string().parse()
    {
        response.metadata_mut().insert(STALE_HEADER, value);
    }
    response
}

type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalScaler for Scaler {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        let (query, reading) = self.backlog(Some(request.get_ref())).await?;
        let result = reading.records > query.activation;
        Ok(answer(IsActiveResponse { result }, reading))
    }

    type StreamIsActiveStream = Stream_<IsActiveResponse>;

    /// Sends whether the object is active at once, then each time it changes (read every second)
    /// until KEDA closes the stream or the server shuts down; an error ends it.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let object = request.into_inner();
        // Bad metadata or an unknown group fail the call itself.
        let (query, reading) = self.backlog(Some(&object)).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let backlogs = self.backlogs.clone();
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut active = reading.records > query.activation;
            if tx
                .send(Ok(IsActiveResponse { result: active }))
                .await
                .is_err()
            {
                return;
            }
            let mut ticks = tokio::time::interval(STREAM_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    () = stopping.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let now = match backlogs.read(&query).await {
                    Ok(reading) => reading.records > query.activation,
                    Err(Failure::Unavailable(why)) => {
                        tracing::warn!(group = %query.group, why, "stream: backlog unreadable, keeping the last answer");
                        continue;
                    }
                    Err(Failure::NotFound(why)) => {
                        let _ = tx.send(Err(Status::not_found(why))).await;
                        return;
                    }
                    Err(Failure::Denied(why)) => {
                        let _ = tx.send(Err(Status::permission_denied(why))).await;
                        return;
                    }
                };
                if now != active {
                    active = now;
                    if tx
                        .send(Ok(IsActiveResponse { result: active }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let object = request.get_ref();
        let query = Query::parse(&object.scaler_metadata).map_err(|why| {
            Status::invalid_argument(format!(
                "scaled object {}/{}: {why}",
                object.namespace, object.name
            ))
        })?;
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: vec![MetricSpec {
                metric_name: query.metric_name(),
                target_size: query.lag_threshold,
                target_size_float: query.lag_threshold as f64,
            }],
        }))
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let request = request.get_ref();
        let (query, reading) = self.backlog(request.scaled_object_ref.as_ref()).await?;
        Ok(answer(
            GetMetricsResponse {
                metric_values: vec![MetricValue {
                    metric_name: query.metric_name(),
                    metric_value: reading.records,
                    metric_value_float: reading.records as f64,
                }],
            },
            reading,
        ))
    }

    type StreamMetricSpecStream = Stream_<GetMetricSpecResponse>;

    /// Not offered: the metric spec only changes with the scaled object, and KEDA falls back to
    /// `GetMetricSpec`.
    async fn stream_metric_spec(
        &self,
        _request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        Err(Status::unimplemented(
            "the metric spec changes only with the scaled object: use GetMetricSpec",
        ))
    }
}
