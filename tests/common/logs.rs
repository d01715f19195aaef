//! A tracing subscriber that keeps the text of every event at or above a
//! level, for tests that check what the library logs (or never logs).

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Collects the text of every event at `level` or more severe (span fields
/// too, so that nothing logged escapes a check).
#[derive(Clone)]
pub struct Logs {
    level: Level,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logs {
    /// Keeps events at `level` and above.
    pub fn at(level: Level) -> Logs {
        Logs {
            level,
            lines: Arc::default(),
        }
    }

    /// Everything kept so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The lines, once `n` have come (or 5 s passed) and a little longer
    /// than the checks take, to catch one too many.
    pub async fn settle(&self, n: usize) -> Vec<String> {
        let start = std::time::Instant::now();
        while self.lines.lock().unwrap().len() < n && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.lines()
    }
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl Subscriber for Logs {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.level
    }
    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut text = Text(String::new());
        attributes.record(&mut text);
        self.lines.lock().unwrap().push(text.0);
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut text = Text(String::new());
        values.record(&mut text);
        self.lines.lock().unwrap().push(text.0);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = Text(String::new());
        event.record(&mut text);
        self.lines.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
