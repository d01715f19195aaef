//! A prototype, for measuring only: the least a client can do per command,
//! to tell what redis-rs costs us. One TCP connection, RESP2, no auth, no
//! TLS, no timeouts, no reconnect: a command is encoded once (and could be
//! shared by every node), handed to a writer task that coalesces whatever
//! is queued into one write (auto-pipelining), and answered in order by a
//! reader task. The benchmark's `floor_lean` rows run the floor's two
//! commands through it, beside the floor's redis-rs rows.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// A reply, as far as the prototype reads one.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Ok,
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Error(String),
    Array(Vec<Reply>),
}

type Waiter = oneshot::Sender<Reply>;

/// A connection; clones share it.
#[derive(Clone)]
pub struct Lean {
    queue: mpsc::UnboundedSender<(Arc<[u8]>, Waiter)>,
}

impl Lean {
    pub async fn connect(addr: &str) -> std::io::Result<Lean> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let (queue, mut commands) = mpsc::unbounded_channel::<(Arc<[u8]>, Waiter)>();
        let waiting: Arc<Mutex<VecDeque<Waiter>>> = Arc::default();
        let writer_waiting = waiting.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(16 * 1024);
            while let Some((bytes, waiter)) = commands.recv().await {
                buf.extend_from_slice(&bytes);
                let mut waiters = vec![waiter];
                // Whatever else is queued goes in the same write.
                while let Ok((bytes, waiter)) = commands.try_recv() {
                    buf.extend_from_slice(&bytes);
                    waiters.push(waiter);
                }
                writer_waiting.lock().unwrap().extend(waiters);
                if write.write_all(&buf).await.is_err() {
                    return;
                }
                buf.clear();
            }
        });
        tokio::spawn(async move {
            let mut read = BufReader::with_capacity(16 * 1024, read);
            let mut line = Vec::with_capacity(64);
            while let Ok(reply) = parse(&mut read, &mut line).await {
                let waiter = waiting.lock().unwrap().pop_front();
                if let Some(waiter) = waiter {
                    let _ = waiter.send(reply);
                }
            }
        });
        Ok(Lean { queue })
    }

    /// Sends an encoded command (see [`encode`]) and waits for its reply.
    pub async fn send(&self, command: Arc<[u8]>) -> Option<Reply> {
        let (tx, rx) = oneshot::channel();
        self.queue.send((command, tx)).ok()?;
        rx.await.ok()
    }
}

/// A command in RESP: an array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Arc<[u8]> {
    use std::io::Write;
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    let _ = write!(out, "*{}\r\n", args.len());
    for arg in args {
        let _ = write!(out, "${}\r\n", arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out.into()
}

/// Reads one reply; `line` is a buffer kept between calls.
async fn parse<R: AsyncBufReadExt + Unpin + Send>(
    read: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<Reply> {
    line.clear();
    read.read_until(b'\n', line).await?;
    if line.len() < 3 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let body = &line[1..line.len() - 2];
    let number = || -> std::io::Result<i64> {
        std::str::from_utf8(body)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::ErrorKind::InvalidData.into())
    };
    Ok(match line[0] {
        b'+' => Reply::Ok,
        b'-' => Reply::Error(String::from_utf8_lossy(body).into_owned()),
        b':' => Reply::Int(number()?),
        b'$' => match number()? {
            -1 => Reply::Nil,
            n => {
                let mut data = vec![0; n as usize + 2];
                read.read_exact(&mut data).await?;
                data.truncate(n as usize);
                Reply::Bulk(data)
            }
        },
        b'*' => match number()? {
            -1 => Reply::Nil,
            n => {
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(Box::pin(parse(read, line)).await?);
                }
                Reply::Array(items)
            }
        },
        _ => return Err(std::io::ErrorKind::InvalidData.into()),
    })
}
