//! The sorted sessions of one connection, as slapd's sssvlv keeps them: a sorted search
//! holds a slot while it runs; a paged one keeps its sorted rows (and its position) between
//! pages, a VLV one keeps them for the next window. Bounded per connection
//! (`sort_sessions_per_connection_max`: one more is busy (51)), each by `sort_entries_max`
//! rows, and dropped when idle for `sort_session_idle_s` or when the connection closes (the
//! session owns this store). Only the connection's worker thread touches it: no lock.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrodir_shard::{SortRow, SortSpec};

/// What a session continues with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Paged,
    Vlv,
}

/// The sorted rows a session keeps between requests.
#[derive(Debug)]
pub struct Kept {
    pub rows: Vec<SortRow>,
    /// A paged session's next row.
    pub next: usize,
    pub spec: Arc<SortSpec>,
}

#[derive(Debug)]
enum State {
    Running,
    Idle { kept: Kept, since: Instant },
}

#[derive(Debug)]
struct Session {
    id: u64,
    kind: Option<Kind>,
    /// The cookie (paged) or contextID (VLV) that continues it; empty while running.
    token: Vec<u8>,
    state: State,
}

/// Why a session could not be had.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is taken, or the one asked for is running.
    Busy,
    /// No session answers to that cookie or context.
    Unknown,
}

#[derive(Debug, Default)]
pub struct Sessions {
    sessions: RefCell<Vec<Session>>,
    next_id: Cell<u64>,
}

/// A session slot held by a running sorted search; released when dropped unless kept.
pub struct Slot {
    sessions: Rc<Sessions>,
    id: u64,
    /// The token a continuation presented, kept for a VLV session (its contextID stays).
    token: Vec<u8>,
    /// Set by [`Slot::keep`]: the session outlives the slot.
    kept: bool,
}

impl Sessions {
    pub fn new() -> Rc<Self> {
        Rc::new(Self::default())
    }

    /// How many sessions the connection holds, running or kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sessions.borrow().len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the sessions idle for `idle` or longer.
    pub fn expire(&self, idle: Duration) {
        self.sessions
            .borrow_mut()
            .retain(|s| !matches!(&s.state, State::Idle { since, .. } if since.elapsed() >= idle));
    }

    /// A slot for a new sorted search.
    pub fn reserve(self: &Rc<Self>, max: usize, idle: Duration) -> Result<Slot, Refused> {
        self.expire(idle);
        let mut sessions = self.sessions.borrow_mut();
        if sessions.len() >= max {
            return Err(Refused::Busy);
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        sessions.push(Session { id, kind: None, token: Vec::new(), state: State::Running });
        Ok(Slot { sessions: self.clone(), id, token: Vec::new(), kept: false })
    }

    /// The kept session of `kind` that `token` names, now running again.
    pub fn resume(
        self: &Rc<Self>,
        kind: Kind,
        token: &[u8],
        idle: Duration,
    ) -> Result<(Slot, Kept), Refused> {
        self.expire(idle);
        let mut sessions = self.sessions.borrow_mut();
        let session = sessions
            .iter_mut()
            .find(|s| s.kind == Some(kind) && !s.token.is_empty() && s.token == token)
            .ok_or(Refused::Unknown)?;
        match std::mem::replace(&mut session.state, State::Running) {
            State::Idle { kept, .. } => Ok((
                Slot { sessions: self.clone(), id: session.id, token: session.token.clone(), kept: false },
                kept,
            )),
            State::Running => Err(Refused::Busy),
        }
    }

    fn release(&self, id: u64) {
        self.sessions.borrow_mut().retain(|s| s.id != id);
    }
}

impl Slot {
    /// Keeps `kept` for a continuation of `kind` and returns the token that continues it:
    /// a fresh cookie for every page (an old one no longer answers), the same contextID
    /// for a VLV session. The session is dropped once idle for `idle` even if the
    /// connection never sends another request.
    pub fn keep(mut self, kind: Kind, kept: Kept, idle: Duration) -> Vec<u8> {
        let token = match kind {
            Kind::Vlv if !self.token.is_empty() => self.token.clone(),
            _ => rand::random::<[u8; 8]>().to_vec(),
        };
        {
            let mut sessions = self.sessions.sessions.borrow_mut();
            if let Some(session) = sessions.iter_mut().find(|s| s.id == self.id) {
                session.kind = Some(kind);
                session.token = token.clone();
                session.state = State::Idle { kept, since: Instant::now() };
            }
        }
        self.kept = true;
        let weak: Weak<Sessions> = Rc::downgrade(&self.sessions);
        // The timer holds no strong reference: a closed connection frees its sessions now.
        actix::spawn(async move {
            tokio::time::sleep(idle).await;
            if let Some(sessions) = weak.upgrade() {
                sessions.expire(idle);
            }
        });
        token
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.kept {
            self.sessions.release(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Kept {
        Kept { rows: Vec::new(), next: 0, spec: Arc::new(SortSpec::default()) }
    }

    /// Runs `test` on an actix system, as a worker thread runs sessions.
    fn on_thread(test: impl std::future::Future<Output = ()>) {
        actix::System::new().block_on(test);
    }

    const IDLE: Duration = Duration::from_secs(60);

    #[test]
    fn slots_are_bounded_and_released_when_dropped() {
        on_thread(async {
            let sessions = Sessions::new();
            let held: Vec<Slot> = (0..5).map(|_| sessions.reserve(5, IDLE).unwrap()).collect();
            assert_eq!(sessions.reserve(5, IDLE).err(), Some(Refused::Busy));
            drop(held);
            assert!(sessions.is_empty());
        });
    }

    #[test]
    fn a_kept_session_resumes_once_per_cookie() {
        on_thread(async {
            let sessions = Sessions::new();
            let cookie = sessions.reserve(5, IDLE).unwrap().keep(Kind::Paged, kept(), IDLE);
            assert_eq!(sessions.len(), 1);
            assert_eq!(sessions.resume(Kind::Vlv, &cookie, IDLE).err(), Some(Refused::Unknown));
            let (slot, _) = sessions.resume(Kind::Paged, &cookie, IDLE).unwrap();
            // Running: the same cookie again is busy; after the next page it is stale.
            assert_eq!(sessions.resume(Kind::Paged, &cookie, IDLE).err(), Some(Refused::Busy));
            let next = slot.keep(Kind::Paged, kept(), IDLE);
            assert_ne!(next, cookie);
            assert_eq!(sessions.resume(Kind::Paged, &cookie, IDLE).err(), Some(Refused::Unknown));
            // A VLV session keeps its contextID.
            let (slot, _) = sessions.resume(Kind::Paged, &next, IDLE).unwrap();
            drop(slot);
            assert!(sessions.is_empty());
            let context = sessions.reserve(5, IDLE).unwrap().keep(Kind::Vlv, kept(), IDLE);
            let (slot, _) = sessions.resume(Kind::Vlv, &context, IDLE).unwrap();
            assert_eq!(slot.keep(Kind::Vlv, kept(), IDLE), context);
        });
    }

    #[test]
    fn idle_sessions_expire() {
        on_thread(async {
            let sessions = Sessions::new();
            let short = Duration::from_millis(20);
            let cookie = sessions.reserve(5, short).unwrap().keep(Kind::Paged, kept(), short);
            // The timer drops it without any request: wait for that (10 s at most), looking
            // only at the count, which expires nothing itself.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !sessions.is_empty() && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(sessions.is_empty(), "the idle session outlived its timer");
            assert_eq!(sessions.resume(Kind::Paged, &cookie, short).err(), Some(Refused::Unknown));
        });
    }
}
