//! `cargo run -p examples --bin secured_notifier -- [TOPIC] [GROUP]`: the notification worker of
//! `examples::secured` on a secured cluster, configured from `KAFKA_*` variables, until ctrl-c.
//!
//! Against the local broker's SASL_SSL listener:
//!
//! ```sh
//! eval "$(scripts/kafka.sh env)"
//! KAFKA_BOOTSTRAP=$KAFKA_SASL_SSL_BOOTSTRAP cargo run -p examples --bin secured_notifier
//! ```

use examples::secured::{Connection, worker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let topic = args.next().unwrap_or_else(|| "notifications".into());
    let group = args.next().unwrap_or_else(|| "secured-notifiers".into());
    let connection = Connection::from_env()?;
    let summary = worker(&connection, &group, &topic)
        .await?
        .run_until_signal()
        .await?;
    eprintln!("{summary:?}");
    Ok(())
}
