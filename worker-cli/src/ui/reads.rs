//! The dashboard's blocking Kafka reads (a page of letters, one letter), a bounded number at once.
//!
//! A read runs on a blocking thread and cannot be stopped midway. Its permit therefore travels
//! with it and is given back when the read ends, not when the request that asked for it gives
//! up (a timeout, a closed connection): otherwise clients that time out keep starting reads
//! while the earlier ones still hold their threads and connections.

use std::sync::Arc;

use tokio::sync::Semaphore;

/// At most `limit` blocking reads at once.
#[derive(Debug)]
pub(crate) struct BlockingReads(Arc<Semaphore>);

impl BlockingReads {
    pub(crate) fn new(limit: usize) -> Self {
        Self(Arc::new(Semaphore::new(limit)))
    }

    /// Runs `read` on a blocking thread once a permit is free; its error as text.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let Ok(permit) = self.0.clone().acquire_owned().await else {
            return Err("the dashboard is stopping".to_owned());
        };
        let reading = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            read()
        });
        match reading.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(format!("{err:#}")),
            Err(err) => Err(format!("the reader failed: {err}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Two reads whose requests gave up still hold both permits: a third waits until one of
    /// them ends.
    #[tokio::test]
    async fn a_permit_is_held_until_the_read_ends_not_until_the_request_gives_up() {
        let reads = BlockingReads::new(2);
        let (release, released) = mpsc::channel::<()>();
        let released = Arc::new(std::sync::Mutex::new(released));
        for _ in 0..2 {
            let released = released.clone();
            let gave_up = tokio::time::timeout(
                Duration::from_millis(50),
                reads.run(move || {
                    let _ = released.lock().map(|r| r.recv());
                    Ok(())
                }),
            )
            .await;
            assert!(gave_up.is_err(), "the read blocks");
        }
        let third = tokio::time::timeout(Duration::from_millis(200), reads.run(|| Ok(3))).await;
        assert!(third.is_err(), "a third read started while two still ran");
        release.send(()).unwrap();
        let third = tokio::time::timeout(Duration::from_secs(10), reads.run(|| Ok(3))).await;
        assert_eq!(third.expect("a permit came back"), Ok(3));
        release.send(()).unwrap();
    }
}
