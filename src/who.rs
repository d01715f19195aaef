//! Who holds a lock: the process that took it (host, pid, program, an
//! optional label) and when, told from its token at no cost to the lock.
//!
//! **The token.** Still 20 bytes, 40 lower-case hex digits, a plain string
//! value as every Redlock client writes it; but laid out:
//!
//! | bytes | what |
//! |---|---|
//! | 0..6 | the taker's [`Id`]: [`MARK`], then 5 random bytes, drawn once per client (and label) |
//! | 6..12 | when the attempt began: Unix time in ms, big-endian (48 bits: until the year 10889) |
//! | 12..20 | 8 bytes from the OS's CSPRNG, fresh for every attempt |
//!
//! Two attempts of one client in one millisecond differ by 64 random bits;
//! nothing else needs tokens to be uniformly random (the reentrant kind's
//! smallest hold token only has to be the same on every node; waiters wait
//! for a name, semaphores and readers for a digest of names). A token
//! stays unguessable by 64 bits, what [`release_token`](crate::Redlock::release_token)
//! needs of it: `status` shows tokens to whoever may read the keys anyway.
//!
//! **The description.** Each client writes, once per connection, on each
//! node, the key `<prefix>who:<id in hex>` (hash-tagged like a resource's
//! key on a Redlock with a Redis Cluster node, [`keys`](crate::keys)):
//! `PSETEX key` [`EXPIRY`] `"host=…\npid=…\nprogram=…\nstarted=<unix ms>[\nlabel=…]"`
//! (`SET … PX` under another name in `INFO commandstats`). Sent in the background on a connection's first acquisition
//! (no round trip of the lock waits for it; a client that only reads,
//! `redquorum status`, writes nothing), again when the connection is older
//! than half the expiry, and on each new connection (a node restarted empty
//! gets it back when the client reconnects). A label's record is written the
//! same way the first time the label is used on a connection. A node that
//! refuses it (an ACL without that key) costs nothing but a warning, once.
//!
//! **Reading.** [`Redlock::status`](crate::Redlock::status) reads the
//! description of each taker it sees (one `MGET` of its key per distinct id, on every
//! node at once, bounded by the node timeout); a failed acquisition that
//! names the holder ([`Error::NotAcquired`](crate::Error::NotAcquired))
//! reads it the same way at the end of the call, once per id and client
//! (cached), never on a successful one.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A taker's id: the first 6 bytes of its tokens.
pub(crate) type Id = [u8; ID_BYTES];

/// Bytes of a token that are its taker's id.
pub(crate) const ID_BYTES: usize = 6;

/// The first byte of every id: tells our tokens from other clients'
/// random ones (with the time's plausibility, see [`parse`]).
pub(crate) const MARK: u8 = 0xa7;

/// How long a description lives on a node without being written again.
pub(crate) const EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// How many labels one client names; past that, a label is not recorded
/// (its locks are the client's unlabelled ones), with a warning.
pub(crate) const MAX_LABELS: usize = 64;

/// How long a description no node had is taken as missing before it is
/// asked for again.
const UNKNOWN_FOR: Duration = Duration::from_secs(10);

/// The longest label, host or program name recorded, in bytes.
const MAX_FIELD: usize = 256;

/// Who took a lock, and when: from a lock's token, with the description its
/// taker recorded on the nodes, if it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Who {
    /// The taker's id, 12 hex digits (the token's first): shared by every
    /// lock of one [`Redlock`](crate::Redlock) (and label).
    pub id: String,
    /// When the lock was taken (its attempt began), by the taker's clock.
    pub since: SystemTime,
    /// The process that took it, as it recorded itself on the nodes; `None`
    /// if no node had the record (a node refused it, it expired, or the
    /// taker is another Redlock client, whose tokens are random).
    pub process: Option<Process>,
}

/// The process that took a lock, as it recorded itself on the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Process {
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its program: the base name of its `argv[0]`.
    pub program: String,
    /// The label its lock was asked with ([`LockRequest::label`](crate::LockRequest::label)).
    pub label: Option<String>,
    /// When its `Redlock` was made.
    pub started: SystemTime,
}

impl Who {
    /// The taker and time a token of ours says, without its description;
    /// `None` for a token that is not ours.
    pub(crate) fn from_token(token: &str) -> Option<Who> {
        let (id, since) = parse(token)?;
        Some(Who {
            id: hex::encode(id),
            since,
            process: None,
        })
    }

    /// The id, as bytes.
    pub(crate) fn raw_id(&self) -> Option<Id> {
        let mut id = [0u8; ID_BYTES];
        hex::decode_to_slice(&self.id, &mut id).ok()?;
        Some(id)
    }
}

impl fmt::Display for Who {
    /// `program[pid] on host (label) since 2024-05-01 12:00:00 UTC (3m ago)`,
    /// or `taker <id> since …` when its description was not found.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.process {
            Some(p) => {
                write!(f, "{}[{}] on {}", p.program, p.pid, p.host)?;
                if let Some(label) = &p.label {
                    write!(f, " ({label})")?;
                }
            }
            None => write!(f, "taker {}", self.id)?,
        }
        write!(f, " since {}", utc(self.since))?;
        if let Ok(ago) = SystemTime::now().duration_since(self.since) {
            write!(f, " ({} ago)", short(ago))?;
        }
        Ok(())
    }
}

/// The taker's id and the time in `token`, if it is one of ours: 40
/// lower-case hex digits, starting with [`MARK`], with a time from 2020 to
/// a day ahead of our clock (another client's random token passes both
/// about once in 400 000).
pub(crate) fn parse(token: &str) -> Option<(Id, SystemTime)> {
    if token.len() != 40 || token.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut raw = [0u8; 20];
    hex::decode_to_slice(token, &mut raw).ok()?;
    if raw[0] != MARK {
        return None;
    }
    let mut ms = [0u8; 8];
    ms[2..].copy_from_slice(&raw[ID_BYTES..2 * ID_BYTES]);
    let since = UNIX_EPOCH + Duration::from_millis(u64::from_be_bytes(ms));
    const YEAR_2020: Duration = Duration::from_secs(1_577_836_800);
    let plausible = since >= UNIX_EPOCH + YEAR_2020
        && since <= SystemTime::now() + Duration::from_secs(24 * 3600);
    let mut id = [0u8; ID_BYTES];
    id.copy_from_slice(&raw[..ID_BYTES]);
    plausible.then_some((id, since))
}

/// A token: `id`, the time now, then 8 bytes of `random`.
pub(crate) fn token(id: &Id, random: &[u8; 20]) -> [u8; 20] {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut raw = [0u8; 20];
    raw[..ID_BYTES].copy_from_slice(id);
    raw[ID_BYTES..2 * ID_BYTES].copy_from_slice(&ms.to_be_bytes()[2..]);
    raw[2 * ID_BYTES..].copy_from_slice(&random[..20 - 2 * ID_BYTES]);
    raw
}

/// The key of `id`'s description.
pub(crate) fn key(prefix: &str, cluster: bool, id: &Id) -> Box<str> {
    crate::keys::key(prefix, cluster, &format!("who:{}", hex::encode(id)))
}

/// One description to write on every node.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) id: Id,
    label: Option<Box<str>>,
    pub(crate) key: Box<str>,
    pub(crate) value: Box<[u8]>,
}

impl Record {
    /// `PSETEX key expiry value`: `SET … PX` under its own name in `INFO
    /// commandstats`, whose `cmdstat_set` then counts lock acquisitions
    /// alone, as before records were written.
    pub(crate) fn set(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("PSETEX");
        cmd.arg(&*self.key)
            .arg(EXPIRY.as_millis() as u64)
            .arg(&*self.value);
        cmd
    }
}

/// This client's takers: what it writes on the nodes, and what it has read
/// of others'. Shared by its nodes.
#[derive(Debug)]
pub(crate) struct Registry {
    prefix: String,
    cluster: bool,
    me: Process,
    /// The unlabelled id, drawn when the client is made.
    plain: Id,
    /// Whether the unlabelled record is among `records`.
    plain_used: AtomicBool,
    /// Every record in use, in the order first used; a connection has
    /// written the first [`count`](Self::count).
    records: RwLock<Vec<std::sync::Arc<Record>>>,
    count: AtomicUsize,
    /// Whether a label past [`MAX_LABELS`] was refused (warned once).
    full: AtomicBool,
    /// Descriptions read, by id, and when (`None`: no node had it, which
    /// is forgotten after [`UNKNOWN_FOR`]: a taker's record may be written
    /// just after its lock).
    known: Mutex<HashMap<Id, (Option<Process>, std::time::Instant)>>,
}

impl Registry {
    pub(crate) fn new(prefix: &str, cluster: bool) -> Registry {
        Registry {
            prefix: prefix.to_owned(),
            cluster,
            me: Process {
                host: host_name(),
                pid: std::process::id(),
                program: program_name(),
                label: None,
                started: SystemTime::now(),
            },
            plain: fresh_id(),
            plain_used: AtomicBool::new(false),
            records: RwLock::default(),
            count: AtomicUsize::new(0),
            full: AtomicBool::new(false),
            known: Mutex::default(),
        }
    }

    /// How many records a connection has to have written.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Records `from..to`.
    pub(crate) fn records(&self, from: usize, to: usize) -> Vec<std::sync::Arc<Record>> {
        let records = self.records.read().unwrap_or_else(|e| e.into_inner());
        records
            .get(from..to.min(records.len()))
            .unwrap_or_default()
            .to_vec()
    }

    /// The id of the locks taken with `label` (none: the client's own),
    /// its record added on first use.
    pub(crate) fn id(&self, label: Option<&str>) -> Id {
        let label = label.filter(|l| !l.is_empty());
        if label.is_none() && self.plain_used.load(Ordering::Relaxed) {
            return self.plain;
        }
        let label = label.map(|l| clean(l, MAX_FIELD));
        {
            let records = self.records.read().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = records
                .iter()
                .find(|r| r.label.as_deref() == label.as_deref())
            {
                return r.id;
            }
        }
        let mut records = self.records.write().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = records
            .iter()
            .find(|r| r.label.as_deref() == label.as_deref())
        {
            return r.id;
        }
        let id = match &label {
            None => self.plain,
            Some(_) if records.iter().filter(|r| r.label.is_some()).count() >= MAX_LABELS => {
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max = MAX_LABELS,
                        "too many lock labels in one client: later ones are not recorded; \
                         a label names a role, not a call"
                    );
                }
                drop(records);
                return self.id(None);
            }
            Some(_) => fresh_id(),
        };
        let process = Process {
            label: label.clone(),
            ..self.me.clone()
        };
        records.push(std::sync::Arc::new(Record {
            id,
            key: key(&self.prefix, self.cluster, &id),
            value: describe(&process).into_bytes().into(),
            label: label.map(Into::into),
        }));
        self.count.store(records.len(), Ordering::Release);
        if id == self.plain {
            self.plain_used.store(true, Ordering::Relaxed);
        }
        id
    }

    /// The key of `id`'s description.
    pub(crate) fn key(&self, id: &Id) -> Box<str> {
        key(&self.prefix, self.cluster, id)
    }

    /// What was read of `id` before: `Some(None)` if no node had it.
    pub(crate) fn known(&self, id: &Id) -> Option<Option<Process>> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let (process, at) = known.get(id)?;
        (process.is_some() || at.elapsed() < UNKNOWN_FOR).then(|| process.clone())
    }

    /// Keeps what was read of `id` (a bounded cache: emptied when full).
    pub(crate) fn learn(&self, id: Id, process: Option<Process>) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= 1024 {
            known.clear();
        }
        known.insert(id, (process, std::time::Instant::now()));
    }
}

/// 20 bytes from the OS. Should the OS ever refuse (no `getrandom`, no
/// `/dev/urandom`), the thread's generator stands in, with an error logged:
/// unique tokens within the process still keep its own locks apart.
pub(crate) fn fresh_bytes() -> [u8; 20] {
    use rand::TryRng;
    let mut bytes = [0u8; 20];
    if let Err(e) = rand::rngs::SysRng.try_fill_bytes(&mut bytes) {
        tracing::error!(error = %e, "the OS random source failed; lock tokens come from the thread's generator");
        rand::fill(&mut bytes);
    }
    bytes
}

/// A fresh id: [`MARK`], then 5 bytes from the OS.
fn fresh_id() -> Id {
    let bytes = fresh_bytes();
    let mut id = [0u8; ID_BYTES];
    id[0] = MARK;
    id[1..].copy_from_slice(&bytes[..ID_BYTES - 1]);
    id
}

/// A record's value: `name=value` lines.
pub(crate) fn describe(p: &Process) -> String {
    let started = p
        .started
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut text = format!(
        "host={}\npid={}\nprogram={}\nstarted={started}",
        p.host, p.pid, p.program
    );
    if let Some(label) = &p.label {
        text += &format!("\nlabel={label}");
    }
    text
}

/// A record's value read back ([`describe`]'s inverse); `None` if it is
/// not one.
pub(crate) fn read(value: &[u8]) -> Option<Process> {
    let text = std::str::from_utf8(value).ok()?;
    let (mut host, mut pid, mut program, mut started, mut label) = (None, None, None, None, None);
    for line in text.lines() {
        let (name, value) = line.split_once('=')?;
        match name {
            "host" => host = Some(value.to_owned()),
            "pid" => pid = value.parse().ok(),
            "program" => program = Some(value.to_owned()),
            "started" => started = value.parse().ok(),
            "label" => label = Some(value.to_owned()),
            _ => {}
        }
    }
    Some(Process {
        host: host?,
        pid: pid?,
        program: program?,
        label,
        started: UNIX_EPOCH + Duration::from_millis(started?),
    })
}

/// `text` on one line (line breaks and `=`-free names need nothing more),
/// at most `max` bytes.
fn clean(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > max {
        let mut end = max;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a live buffer of the length given.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    match name.is_empty() {
        true => "unknown".to_owned(),
        false => clean(&name, MAX_FIELD),
    }
}

fn program_name() -> String {
    let arg0 = std::env::args_os().next().unwrap_or_default();
    let base = std::path::Path::new(&arg0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match base.is_empty() {
        true => "unknown".to_owned(),
        false => clean(&base, MAX_FIELD),
    }
}

/// `2024-05-01 12:00:00 UTC`.
pub(crate) fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `3h12m`, `4m5s`, `12s`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_the_taker_and_the_time() {
        let registry = Registry::new("p:", false);
        let id = registry.id(None);
        assert_eq!(id[0], MARK);
        let before = SystemTime::now() - Duration::from_millis(1);
        let raw = token(&id, &fresh_bytes());
        let text = hex::encode(raw);
        let (read_id, since) = parse(&text).unwrap();
        assert_eq!(read_id, id);
        assert!(since >= before && since <= SystemTime::now(), "{since:?}");
        // Not ours: another byte first, upper case, another length, a
        // time from before 2020.
        assert_eq!(parse(&format!("00{}", &text[2..])), None);
        assert_eq!(parse(&text.to_uppercase()), None);
        assert_eq!(parse(&text[2..]), None);
        let old = format!("{}000000000001{}", &text[..12], &text[24..]);
        assert_eq!(parse(&old), None);
        // Same taker, same millisecond: still different tokens.
        let other = token(&id, &fresh_bytes());
        assert_eq!(raw[..6], other[..6]);
        assert_ne!(raw, other);
    }

    #[test]
    fn labels_have_their_own_ids_and_records() {
        let registry = Registry::new("p:", false);
        assert_eq!(registry.count(), 0);
        let plain = registry.id(None);
        assert_eq!(registry.id(Some("")), plain);
        assert_eq!(registry.count(), 1);
        let a = registry.id(Some("backup"));
        assert_ne!(a, plain);
        assert_eq!(registry.id(Some("backup")), a);
        assert_eq!(registry.count(), 2);
        let records = registry.records(0, 2);
        assert_eq!(&*records[1].key, format!("p:who:{}", hex::encode(a)));
        let process = read(&records[1].value).unwrap();
        assert_eq!(process.label.as_deref(), Some("backup"));
        assert_eq!(process.pid, std::process::id());
        assert!(read(&records[0].value).unwrap().label.is_none());
        for i in 0..2 * MAX_LABELS {
            registry.id(Some(&format!("l{i}")));
        }
        assert_eq!(registry.count(), MAX_LABELS + 1);
        assert_eq!(registry.id(Some("l1000")), plain);
        assert_eq!(
            &*key("p:", true, &a),
            format!("{{p:who:{}}}", hex::encode(a))
        );
    }

    #[test]
    fn descriptions_round_trip_and_show() {
        let p = Process {
            host: "h1".into(),
            pid: 42,
            program: "job".into(),
            label: Some(clean("nightly\nreport", 99)),
            started: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        };
        assert_eq!(read(describe(&p).as_bytes()), Some(p.clone()));
        assert_eq!(read(b"not=a\nrecord"), None);
        let who = Who {
            id: "a70102030405".into(),
            since: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            process: Some(p),
        };
        let text = who.to_string();
        assert!(
            text.starts_with("job[42] on h1 (nightly report) since 2023-11-14 22:13:20 UTC ("),
            "{text}"
        );
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(short(Duration::from_secs(3725)), "1h2m");
    }
}
