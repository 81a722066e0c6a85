//! Runnable examples of share-group workers; each lives in `src/bin/`.
