//! KEDA's External Scaler service over the backlogs.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::Limits;
use crate::backlog::{Failure, Reading, Source};
use crate::metadata::Query;
use crate::proto::external_scaler_server::ExternalScaler;
use crate::proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use crate::readers::{Bounds, Follow, Readers};

/// The response header that flags a value as the last one read (its age in seconds): the cluster
/// did not answer within the bound.
pub const STALE_HEADER: &str = "x-share-scaler-stale-seconds";

/// The scaler: answers KEDA from the backlogs it reads.
#[derive(Clone, Debug)]
pub struct Scaler {
    readers: Arc<Readers>,
    /// A permit per open `StreamIsActive` stream.
    streams: Arc<Semaphore>,
    pub(crate) limits: Limits,
    /// Fired when the server shuts down: open streams end, so the shutdown does not wait for
    /// KEDA to close them.
    pub(crate) stopping: CancellationToken,
}

impl Scaler {
    pub(crate) fn new(source: impl Source, bound: Duration, limits: &Limits) -> Self {
        let stopping = CancellationToken::new();
        let bounds = Bounds {
            read: bound,
            every: limits.every,
            targets: limits.targets,
        };
        Self {
            readers: Arc::new(Readers::new(source, bounds, stopping.clone())),
            streams: Arc::new(Semaphore::new(limits.streams)),
            limits: *limits,
            stopping,
        }
    }

    /// The query of `object`, and its backlog now.
    async fn backlog(&self, object: Option<&ScaledObjectRef>) -> Result<(Query, Reading), Status> {
        let query = query(object)?;
        let reading = self.readers.read(&query.target()).await.map_err(status)?;
        Ok((query, reading))
    }
}

/// The query `object`'s metadata asks for; bad metadata is `INVALID_ARGUMENT`, naming the key.
fn query(object: Option<&ScaledObjectRef>) -> Result<Query, Status> {
    let object = object.ok_or_else(|| Status::invalid_argument("no scaled object"))?;
    Query::parse(&object.scaler_metadata).map_err(|why| {
        Status::invalid_argument(format!(
            "scaled object {}/{}: {why}",
            bounded(&object.namespace),
            bounded(&object.name)
        ))
    })
}

/// A client's name for its object, cut short for an error message.
fn bounded(name: &str) -> String {
    name.chars().take(253).collect()
}

/// The gRPC status of `failure`.
fn status(failure: Failure) -> Status {
    match failure {
        Failure::NoGroup(why) | Failure::NotFound(why) => Status::not_found(why),
        Failure::Denied(why) => Status::permission_denied(why),
        Failure::Unavailable(why) => Status::unavailable(why),
        Failure::Exhausted(why) => Status::resource_exhausted(why),
    }
}

/// What a stream holds between answers: its hold on the reader, its place among the streams,
/// its last answer, and whether that answer is still to be sent.
struct Streaming {
    follow: Follow,
    _permit: OwnedSemaphorePermit,
    active: bool,
    unsent: bool,
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

    /// Sends whether the object is active at once, then each time it changes (its target read
    /// every [`Limits::every`], by the one reader every stream and call of the target shares)
    /// until KEDA closes the stream or the server shuts down; an error ends it.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let object = request.into_inner();
        // Bad metadata, an unknown group or a full scaler fail the call itself.
        let query = query(Some(&object))?;
        let permit = self.streams.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} streams are open already, the most this scaler serves",
                self.limits.streams
            ))
        })?;
        let mut follow = self.readers.follow(&query.target(), true).map_err(status)?;
        let first = follow.now().await.map_err(status)?;
        let start = Streaming {
            follow,
            _permit: permit,
            active: first.records > query.activation,
            unsent: true,
        };
        let stopping = self.stopping.clone();
        let answers = futures::stream::unfold(Some(start), move |state| {
            let stopping = stopping.clone();
            let group = query.group.clone();
            let activation = query.activation;
            async move {
                let mut state = state?;
                if state.unsent {
                    state.unsent = false;
                    let answer = IsActiveResponse {
                        result: state.active,
                    };
                    return Some((Ok(answer), Some(state)));
                }
                loop {
                    let next = tokio::select! {
                        () = stopping.cancelled() => return None,
                        next = state.follow.next() => next?,
                    };
                    match next {
                        Ok(reading) => {
                            let active = reading.records > activation;
                            if active != state.active {
                                state.active = active;
                                return Some((
                                    Ok(IsActiveResponse { result: active }),
                                    Some(state),
                                ));
                            }
                        }
                        Err(Failure::Unavailable(why)) => {
                            tracing::warn!(
                                group,
                                why,
                                "stream: backlog unreadable, keeping the last answer"
                            );
                        }
                        Err(failure) => return Some((Err(status(failure)), None)),
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let query = query(Some(request.get_ref()))?;
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
