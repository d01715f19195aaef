//! One lock's record: what its requests and its handles share, in one
//! allocation as small as it can be (a process may hold many thousands of
//! locks at once).
//!
//! Each attempt's [`LockId`](super::LockId) makes one, and a held lock keeps
//! only it (and, in the engine's `hold`, what it shares with the client's
//! other locks): its token, as 20 raw bytes; its first key; its [`Gate`];
//! and, once held, its validity deadline, its TTL and a few flags, all read
//! and written by the engine's `hold`. What few locks need — a `Notify`
//! for whoever waits on the lock, the watchdog's handle, the token in hex —
//! is a second allocation, [`Extras`], made the first time one of them is
//! asked for.
//!
//! A [`LockState`] is a thin pointer to a reference-counted block laid out by
//! hand: a header ([`Head`]), then the token and the key inline. An `Arc`
//! cannot end in a variable-length tail behind a thin pointer, and keeps a
//! weak count nobody needs here; a `Box<str>` for the key would be one more
//! allocation and 16 more bytes.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::sync::atomic::{self, AtomicPtr, AtomicU8, AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::gate::Gate;

/// Bytes in a raw token; its hex form has twice as many.
pub(crate) const TOKEN_BYTES: usize = 20;

/// A counted reference to one lock's record. Cheap to clone (one atomic
/// increment); the record is freed with its last reference.
pub(crate) struct LockState {
    block: NonNull<Block>,
}

/// The start of the allocation: the count, then the header. The token and
/// the key follow at [`TAIL`].
struct Block {
    refs: AtomicUsize,
    head: Head,
}

/// Where the token (then the key) starts: right after the [`Block`], whose
/// size is a multiple of its alignment (the bytes need none).
const TAIL: usize = size_of::<Block>();

/// A record's fixed part.
pub(crate) struct Head {
    /// The lock's gate (see [`gate`](super::gate)).
    pub(crate) gate: Gate,
    /// For the engine's `hold`: the validity deadline.
    pub(crate) deadline: AtomicU64,
    /// For the engine's `hold`: the TTL the lock was last given, in ms.
    pub(crate) ttl_ms: AtomicU64,
    /// For the engine's `hold`: its flags.
    pub(crate) flags: AtomicU8,
    /// Null until [`LockState::extras`] is first called; never changed after.
    extras: AtomicPtr<Extras>,
    /// The key's length in bytes.
    key_len: u32,
}

/// What few locks need, made on first use (see [`LockState::extras`]).
pub(crate) struct Extras {
    /// Wakes whoever waits on the lock (see [`LockState::wake`]).
    pub(crate) changed: Notify,
    /// The watchdog, once started: aborted by a release or drop.
    pub(crate) keeper: Mutex<Option<AbortHandle>>,
    /// The token, in lower-case hex.
    token: [u8; 2 * TOKEN_BYTES],
}

impl Extras {
    /// The token, 40 hex digits.
    pub(crate) fn token(&self) -> &str {
        // Hex digits are ASCII.
        std::str::from_utf8(&self.token).unwrap_or_default()
    }
}

// Every field is shared between threads through `&LockState`. (The check on
// `Head` says nothing of what its extras pointer points to — an
// `AtomicPtr<T>` is `Send + Sync` whatever `T` — so `Extras` is checked
// on its own.)
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Head>();
    send_and_sync::<Extras>();
};

// SAFETY: a `LockState` gives only shared access to its `Head` and `Extras`,
// which are `Send + Sync` (checked above), and to bytes written once before
// any reference is handed out; the count is atomic.
unsafe impl Send for LockState {}
// SAFETY: as for `Send`.
unsafe impl Sync for LockState {}

/// The layout of a record whose key has `key_len` bytes.
fn layout(key_len: usize) -> Layout {
    let tail = Layout::array::<u8>(TOKEN_BYTES + key_len).expect("a key too long to allocate");
    let (layout, at) = Layout::new::<Block>()
        .extend(tail)
        .expect("a key too long to allocate");
    debug_assert_eq!(at, TAIL);
    layout.pad_to_align()
}

impl LockState {
    /// A record of the lock with `token` on `key` (its first, for a set),
    /// with its gate open.
    pub(crate) fn new(token: &[u8; TOKEN_BYTES], key: &str) -> LockState {
        // Redis keys are at most 512 MB.
        let key_len = u32::try_from(key.len()).expect("a key longer than 4 GiB");
        let layout = layout(key.len());
        // SAFETY: the layout is not zero-sized: it holds a `Block`.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(block) = NonNull::new(raw.cast::<Block>()) else {
            alloc::handle_alloc_error(layout)
        };
        let head = Head {
            gate: Gate::default(),
            deadline: AtomicU64::new(0),
            ttl_ms: AtomicU64::new(0),
            flags: AtomicU8::new(0),
            extras: AtomicPtr::new(ptr::null_mut()),
            key_len,
        };
        // SAFETY: `raw` is a fresh allocation of `layout`: room for a
        // `Block` at its start (aligned, as the layout is), then for
        // `TOKEN_BYTES + key.len()` bytes at `TAIL`.
        unsafe {
            block.as_ptr().write(Block {
                refs: AtomicUsize::new(1),
                head,
            });
            let tail = raw.add(TAIL);
            ptr::copy_nonoverlapping(token.as_ptr(), tail, TOKEN_BYTES);
            ptr::copy_nonoverlapping(key.as_ptr(), tail.add(TOKEN_BYTES), key.len());
        }
        LockState { block }
    }

    fn block(&self) -> &Block {
        // SAFETY: the block lives while any `LockState` of it does.
        unsafe { self.block.as_ref() }
    }

    /// The token and the key, as written by `new`.
    fn tail(&self) -> &[u8] {
        let len = TOKEN_BYTES + self.block().head.key_len as usize;
        // SAFETY: the allocation holds `len` bytes at `TAIL`, initialised by
        // `new` and never written since; it lives while `self` does. The
        // pointer is derived from the allocation's, not from `&Block`.
        unsafe { std::slice::from_raw_parts(self.block.as_ptr().cast::<u8>().add(TAIL), len) }
    }

    /// The token, raw.
    pub(crate) fn token(&self) -> &[u8; TOKEN_BYTES] {
        self.tail()[..TOKEN_BYTES]
            .try_into()
            .expect("the tail starts with the token")
    }

    /// The key (the first, for a set).
    pub(crate) fn key(&self) -> &str {
        // Copied from a `str` by `new`.
        std::str::from_utf8(&self.tail()[TOKEN_BYTES..]).unwrap_or_default()
    }

    /// The lock's [`Extras`], made now if they were not yet.
    pub(crate) fn extras(&self) -> &Extras {
        let slot = &self.block().head.extras;
        let mut extras = slot.load(Ordering::Acquire);
        if extras.is_null() {
            let mut token = [0u8; 2 * TOKEN_BYTES];
            // Cannot fail: the output is exactly twice the input.
            let _ = hex::encode_to_slice(self.token(), &mut token);
            let made = Box::into_raw(Box::new(Extras {
                changed: Notify::new(),
                keeper: Mutex::new(None),
                token,
            }));
            extras = match slot.compare_exchange(
                ptr::null_mut(),
                made,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => made,
                Err(theirs) => {
                    // SAFETY: `made` came from `Box::into_raw` just above and
                    // was never shared.
                    drop(unsafe { Box::from_raw(made) });
                    theirs
                }
            };
        }
        // SAFETY: set once from `Box::into_raw`, never changed, and freed
        // only with the block, which outlives the borrow of `self`.
        unsafe { &*extras }
    }

    /// The lock's [`Extras`], if they have been made.
    pub(crate) fn extras_if_any(&self) -> Option<&Extras> {
        let extras = self.block().head.extras.load(Ordering::Acquire);
        // SAFETY: as in `extras`.
        (!extras.is_null()).then(|| unsafe { &*extras })
    }

    /// Wakes whoever waits on [`Extras::changed`]: call it after the change
    /// they wait for has been written.
    ///
    /// Nobody waits without the extras, and they are made only for a
    /// waiter, who makes them, then registers with `changed`, then reads
    /// what it waits for. A read-modify-write of the pointer, rather than a
    /// load, is what makes that safe without a lock: if it finds no extras,
    /// the waiter's later making of them reads what it wrote, so the change
    /// written before it is seen by the waiter's read after. Do not make it
    /// a plain load: that would lose wake-ups, and no test is likely to
    /// catch it.
    pub(crate) fn wake(&self) {
        let slot = &self.block().head.extras;
        let (Ok(extras) | Err(extras)) = slot.compare_exchange(
            ptr::null_mut(),
            ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if !extras.is_null() {
            // SAFETY: as in `extras`.
            unsafe { &*extras }.changed.notify_waiters();
        }
    }
}

impl Deref for LockState {
    type Target = Head;

    fn deref(&self) -> &Head {
        &self.block().head
    }
}

impl Clone for LockState {
    fn clone(&self) -> LockState {
        // As `Arc` does: a new reference is made from a live one, so the
        // block cannot be freed meanwhile and no ordering is needed; a
        // count that could overflow means references are being leaked.
        if self.block().refs.fetch_add(1, Ordering::Relaxed) > isize::MAX as usize {
            std::process::abort();
        }
        LockState { block: self.block }
    }
}

impl Drop for LockState {
    fn drop(&mut self) {
        // As `Arc` does: the last reference frees the block, after every
        // use of it by the others (their decrements release, this acquires).
        if self.block().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        atomic::fence(Ordering::Acquire);
        let layout = layout(self.block().head.key_len as usize);
        // SAFETY: this was the last reference: nothing else reads the block,
        // which `new` allocated with this layout and initialised.
        unsafe {
            ptr::drop_in_place(self.block.as_ptr());
            alloc::dealloc(self.block.as_ptr().cast(), layout);
        }
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        let extras = *self.extras.get_mut();
        if !extras.is_null() {
            // SAFETY: made by `Box::into_raw` in `LockState::extras`; the last
            // reference to the block is going, and the extras with it.
            drop(unsafe { Box::from_raw(extras) });
        }
    }
}

impl fmt::Debug for LockState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockState")
            .field("key", &self.key())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_its_token_and_key_and_is_small() {
        let token = [0xab; TOKEN_BYTES];
        let shared = LockState::new(&token, "redquorum:report");
        assert_eq!(shared.token(), &token);
        assert_eq!(shared.key(), "redquorum:report");
        assert!(shared.extras_if_any().is_none());
        assert_eq!(shared.extras().token(), "ab".repeat(TOKEN_BYTES));
        assert!(shared.extras_if_any().is_some());
        // One pointer per handle; the header and the count in 48 bytes.
        assert_eq!(size_of::<LockState>(), size_of::<usize>());
        #[cfg(target_pointer_width = "64")]
        assert_eq!(TAIL, 48);
        let empty = LockState::new(&token, "");
        assert_eq!(empty.key(), "");
    }

    #[test]
    fn references_are_counted_across_threads() {
        let shared = LockState::new(&[1; TOKEN_BYTES], "k");
        let _ = shared.extras();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        let clone = shared.clone();
                        clone.wake();
                        assert_eq!(clone.key(), "k");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(shared.block().refs.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_registers_before_reading_is_woken() {
        let shared = LockState::new(&[2; TOKEN_BYTES], "k");
        let waiter = {
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    let changed = shared.extras().changed.notified();
                    let mut changed = std::pin::pin!(changed);
                    changed.as_mut().enable();
                    if shared.deadline.load(Ordering::Acquire) == 7 {
                        return;
                    }
                    changed.await;
                }
            })
        };
        tokio::task::yield_now().await;
        shared.deadline.store(7, Ordering::Release);
        shared.wake();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
