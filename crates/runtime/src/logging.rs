//! Logging setup: `tracing` events to stderr, as plain lines that read well
//! in journald or as one JSON object per line.
//!
//! Daemons call [`init`] once at start, after loading their config.

use std::io::IsTerminal;

use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer, Registry};

/// How log lines are written (`log_format` / `--log-format`).
#[derive(Serialize, Deserialize, clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines; no colours off a terminal, no timestamps under journald.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The format [`init`] installed, if it did.
static FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format of the log [`init`] installed; `None` before (or if another
/// subscriber was installed first).
pub fn current_format() -> Option<LogFormat> {
    FORMAT.get().copied()
}

/// Installs the global subscriber writing to stderr. `RUST_LOG`, when set
/// and valid, overrides `level`. Only the first call takes effect; later
/// calls (and calls after another subscriber was installed) do nothing.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let layer: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Json => fmt::layer().json().with_writer(std::io::stderr).with_filter(filter).boxed(),
        LogFormat::Text => {
            let text = fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
            if stderr_is_journal() {
                // journald stamps every line itself.
                text.without_time().with_filter(filter).boxed()
            } else {
                text.with_filter(filter).boxed()
            }
        }
    };
    // Err means a subscriber is already installed: keep it.
    if tracing_subscriber::registry().with(layer).try_init().is_ok() {
        let _ = FORMAT.set(format);
    }
}

/// Whether stderr goes to the journal. systemd sets `JOURNAL_STREAM` to
/// `device:inode` of the stream it connected; a child that inherited the
/// variable but had stderr redirected is told apart by comparing the two
/// when stderr can be inspected.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;

    let Some(value) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else { return true };
    match (dev.parse::<u64>(), ino.parse::<u64>(), std::fs::metadata("/proc/self/fd/2")) {
        (Ok(dev), Ok(ino), Ok(md)) => md.dev() == dev && md.ino() == ino,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_twice_is_harmless() {
        init(LogFormat::Text, "debug");
        init(LogFormat::Json, "not a [valid filter");
        tracing::info!("logging works after two init calls");
    }

    #[test]
    fn log_format_names() {
        assert_eq!(serialized_name(LogFormat::Text), "text");
        assert_eq!(serialized_name(LogFormat::Json), "json");
        assert_eq!(<LogFormat as clap::ValueEnum>::from_str("json", false), Ok(LogFormat::Json));
    }

    fn serialized_name(f: LogFormat) -> String {
        toml::Value::try_from(f).unwrap().as_str().unwrap().to_owned()
    }
}
