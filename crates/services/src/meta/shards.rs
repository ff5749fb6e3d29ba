//! Metadata on K shards (see `weft_wire::shard` for the placement).
//!
//! Entries and files live on the shard their `(parent id, name)` hashes
//! to; directories live on every shard, so each shard walks paths and
//! checks permissions alone. A directory change is made by its home shard
//! (the coordinator: the shard that made it) in one local transaction that
//! also appends it to the shard's directory log; the coordinator then
//! pushes the log, in order, to every other shard, which applies each
//! entry once (by the coordinator's sequence number) and durably. An entry
//! leaves the log once every shard has it; a restarted coordinator pushes
//! what is left, so a crash between the local commit and the pushes is
//! rolled forward, never half-applied for good.
//!
//! rmdir is two steps: the home shard pushes `Mark` (each shard refuses if
//! it holds an entry of the directory, else refuses new entries in it),
//! then `Rmdir` if no shard refused, or `Unmark`. A restarted coordinator
//! unmarks what it had marked (its rmdir was not answered).
//!
//! Pushes go to each shard's replica thread (`server::reactor`), which
//! never waits on another shard, so two shards pushing to each other
//! cannot wait on each other.

use super::{dir_moves, links_across, name_moves};
use super::tables::{decode_attr, encode_attr, err, MetaError, Result, Tables, COUNTERS, DIRENTS, INODES};
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use weft_net::{ClientAuth, Endpoint, EndpointConfig};
use weft_wire::msg::replica::{check_seal, seal};
use weft_wire::shard::{entry_shard, home_shard};
use weft_wire::{CapKey, Cred, ErrorCode, FileId, FileKind, MetaReq, ReplicaOp, Request, Response};

/// This shard's directory changes not yet taken by every other shard.
pub(super) const REPLOG: TableDefinition<u64, &[u8]> = TableDefinition::new("replica_log");
/// The last sequence number applied from each coordinator.
pub(super) const APPLIED: TableDefinition<u32, u64> = TableDefinition::new("replica_applied");
/// Directories being removed (rmdir's first step): no new entries.
pub(super) const MARKED: TableDefinition<u64, u64> = TableDefinition::new("marked_dirs");
/// Files this shard is renaming to another: id to [`Moving`].
pub(super) const MOVING: TableDefinition<u64, &[u8]> = TableDefinition::new("moving_files");
/// Files renamed from this shard to another: id to that shard (requests
/// by id are sent on).
pub(super) const MOVED: TableDefinition<u64, u32> = TableDefinition::new("moved_files");
/// Renames and links across shards this shard was asked to take:
/// (coordinator, sequence number) to whether it took the file or made the
/// name (a resend's answer).
pub(super) const ADOPTED: TableDefinition<(u32, u64), u8> = TableDefinition::new("adopted_files");

/// A rename across shards in progress on its source shard: the `Adopt` at
/// `seq` and the source entry it removes once the target took the file.
pub(super) struct Moving {
    pub(super) seq: u64,
    pub(super) parent: FileId,
    pub(super) name: String,
}

impl Moving {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut e = weft_wire::Encoder::new();
        e.u64(self.seq).u64(self.parent.0).str(&self.name);
        e.finish()
    }

    pub(super) fn decode(b: &[u8]) -> Result<Self> {
        let mut d = weft_wire::Decoder::new(b);
        let m = (|| Ok::<_, weft_wire::DecodeError>(Moving { seq: d.u64()?, parent: FileId(d.u64()?), name: d.str("name", weft_wire::limits::MAX_NAME_LEN)? }))();
        m.map_err(|e| err(ErrorCode::Internal, format!("corrupt rename record: {e}")))
    }
}

/// A shard's answer to a pushed `Mark`, `PrepareMove` or `Adopt` (what
/// the coordinator waits for).
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) seq: u64,
    pub(super) shard: u32,
    pub(super) response: Response,
    /// A vote: to a `Mark` or a `PrepareMove` (else to an `Adopt`).
    pub(super) vote: bool,
}

/// Directory changes a shard keeps for others at most.
const MAX_LOG: u64 = 100_000;

/// Log entries not yet taken by every shard past which directory times
/// (`Touch`) wait in memory, merged, instead of joining the log.
const TOUCH_BACKLOG: u64 = 1_000;

/// How long a push waits for one shard before the change is reported as
/// not taken (it stays in the log and is pushed again).
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where this server sits among the metadata shards.
#[derive(Debug, Clone)]
pub struct ShardPlace {
    /// Its shard number.
    pub index: u32,
    /// K.
    pub count: u32,
    /// Every other shard: number and address.
    pub peers: Vec<(u32, SocketAddr)>,
    /// How this shard proves itself to the others (the cluster's secret).
    pub auth: Option<ClientAuth>,
    /// How it reaches them (transport, polling: the server's settings).
    pub endpoint: EndpointConfig,
}

impl ShardPlace {
    /// A cluster of one shard.
    pub fn alone() -> Self {
        ShardPlace { index: 0, count: 1, peers: Vec::new(), auth: None, endpoint: EndpointConfig::default() }
    }
}

pub(super) struct Shards {
    pub(super) place: ShardPlace,
    key: CapKey,
    endpoint: Option<Endpoint>,
    /// The last log entry each peer (in `place.peers` order) took; held
    /// through a push, so one push at a time and each shard gets the log in
    /// order. Zero after a start: everything is sent again (peers apply
    /// each entry once).
    acked: Mutex<Vec<u64>>,
    /// Sizes this shard vouches for: a file renamed away leaves them.
    sizes: Arc<super::sizes::KnownSizes>,
    /// Renames across shards settled, by their `Adopt`'s sequence number,
    /// with the target's answer, until the request that made each takes it
    /// (another push may have settled it).
    settled: Mutex<std::collections::HashMap<u64, Response>>,
    /// Votes (answers to `Mark`s and `PrepareMove`s) by sequence number.
    votes: Mutex<std::collections::HashMap<u64, Vec<(u32, Response)>>>,
    /// Directories of other homes whose entries changed here, and when:
    /// told to every shard by the next `Touch`.
    touches: Mutex<std::collections::HashMap<FileId, i64>>,
}

impl Shards {
    pub(super) fn new(place: ShardPlace, key: CapKey, sizes: Arc<super::sizes::KnownSizes>) -> std::io::Result<Self> {
        let endpoint = match (&place.auth, place.count > 1) {
            (Some(auth), true) => Some(Endpoint::new(auth.clone(), EndpointConfig { op_timeout: PUSH_TIMEOUT, ..place.endpoint.clone() })?),
            (None, true) => return Err(std::io::Error::other("a metadata shard needs the cluster's credentials to reach the others")),
            _ => None,
        };
        let acked = Mutex::new(vec![0; place.peers.len()]);
        Ok(Shards { place, key, endpoint, acked, sizes, settled: Default::default(), votes: Default::default(), touches: Default::default() })
    }

    pub(super) fn sharded(&self) -> bool {
        self.place.count > 1
    }

    /// Is entry `name` of directory `parent` kept here?
    pub(super) fn owns(&self, parent: FileId, name: &str) -> bool {
        entry_shard(parent, name, self.place.count) == self.place.index
    }

    /// The answer sending a client to the shard of `(parent, name)`, if
    /// that is not this one.
    pub(super) fn route(&self, parent: FileId, name: &str) -> Option<Response> {
        let shard = entry_shard(parent, name, self.place.count);
        (shard != self.place.index).then_some(Response::Route { shard, shards: self.place.count, parent })
    }

    /// The answer sending a client to file `id`'s home shard, if not here.
    pub(super) fn route_id(&self, id: FileId) -> Option<Response> {
        let shard = home_shard(id, self.place.count);
        (shard != self.place.index).then_some(Response::Route { shard, shards: self.place.count, parent: FileId(0) })
    }

    /// Refuses a replica message not sealed by another shard of this cluster.
    pub(super) fn check_replica(&self, coord: u32, seq: u64, op: &ReplicaOp, mac: &[u8; 32]) -> Result<()> {
        if coord >= self.place.count || coord == self.place.index || !check_seal(&self.key, coord, seq, op, mac) {
            return Err(err(ErrorCode::Permission, "a directory change from something other than another metadata shard of this cluster"));
        }
        Ok(())
    }

    /// Appends `op` to this shard's log in `tx` (pushed after the commit).
    /// A log that a shard has not taken for long is bounded: new
    /// directory changes wait (`Busy`) until it takes them. The decisions
    /// that end a step already logged (a rename made or abandoned, an
    /// rmdir abandoned) are always taken, or a full log would leave names
    /// held for good.
    /// The sequence number of this shard's last logged change.
    pub(super) fn log_seq(&self, tx: &WriteTransaction) -> Result<u64> {
        Ok(tx.open_table(COUNTERS)?.get("replica_seq")?.map_or(0, |v| v.value()))
    }

    pub(super) fn log(&self, tx: &WriteTransaction, op: &ReplicaOp) -> Result<u64> {
        use redb::ReadableTableMetadata;
        // (An `Unname` too: the name is gone on the file's shard already.)
        let decision = matches!(op, ReplicaOp::Move { .. } | ReplicaOp::Unprepare { .. } | ReplicaOp::Unmark { .. } | ReplicaOp::Unname { .. });
        if !decision && tx.open_table(REPLOG)?.len()? >= MAX_LOG {
            return Err(err(ErrorCode::Busy, format!("{MAX_LOG} directory changes of this shard are not on every shard yet (a shard is down?): try again once they are")));
        }
        let mut counters = tx.open_table(COUNTERS)?;
        let seq = counters.get("replica_seq")?.map_or(0, |v| v.value()) + 1;
        counters.insert("replica_seq", seq)?;
        tx.open_table(REPLOG)?.insert(seq, op.to_bytes().as_slice())?;
        Ok(seq)
    }

    /// Pushes the log, in order, to every other shard: each gets the
    /// entries it has not acknowledged, so a shard that is down holds back
    /// only itself. Entries every shard took leave the log, but for a
    /// rename not yet settled here. The answers to `Mark`s (every shard's)
    /// are kept by sequence number for the rmdir that waits for them
    /// ([`Shards::take_marks`], whichever push carried them); renames whose
    /// target answered are settled. Fails naming a shard that did not take
    /// an entry (it stays logged and is pushed again later). The database
    /// is held only to read and write, never across the network.
    pub(super) fn push(&self, store: &super::store::Store) -> Result<()> {
        let Some(endpoint) = &self.endpoint else { return Ok(()) };
        let mut acked = self.acked.lock().unwrap_or_else(PoisonError::into_inner);
        let from = acked.iter().copied().min().unwrap_or(0) + 1;
        let entries: Vec<(u64, ReplicaOp)> = {
            let db = store.db()?;
            let tx = db.begin_read()?;
            let log = tx.open_table(REPLOG)?;
            let mut v = Vec::new();
            for item in log.range(from..)? {
                let (k, val) = item?;
                let op = ReplicaOp::from_bytes(val.value()).map_err(|e| err(ErrorCode::Internal, format!("corrupt directory log entry {}: {e}", k.value())))?;
                v.push((k.value(), op));
            }
            v
        };
        let peers = &self.place.peers;
        let mut answers = Vec::new();
        let mut failure: Option<MetaError> = None;
        let mut down = vec![false; peers.len()];
        for (seq, op) in &entries {
            let to: Vec<usize> = (0..peers.len()).filter(|&p| !down[p] && acked[p] < *seq).collect();
            if to.is_empty() {
                continue;
            }
            let mac = seal(&self.key, self.place.index, *seq, op);
            let body = Request::Meta { cred: Cred::new(0, 0), op: MetaReq::Replica { coord: self.place.index, seq: *seq, op: Box::new(op.clone()), mac } }.encode();
            let mut calls: Vec<weft_net::Call<'_>> = to.iter().map(|&p| weft_net::Call::new(peers[p].1, body.clone())).collect();
            endpoint.run_within(&mut calls, usize::MAX, PUSH_TIMEOUT);
            for (p, call) in to.into_iter().zip(calls) {
                let (shard, addr) = peers[p];
                let answer = call.result.expect("run fills every result").map_err(|e| e.to_string()).and_then(|r| Response::decode(&r.body).map_err(|e| e.to_string()));
                // Taken: `Ok`, a rename's `Renamed`, or `Refused` (applied
                // by refusing). An `Error` means it was not applied.
                let problem = match answer {
                    Ok(response @ (Response::Ok | Response::Renamed { .. } | Response::Refused { .. })) => {
                        let vote = matches!(op, ReplicaOp::Mark { .. } | ReplicaOp::PrepareMove(_));
                        if vote || matches!(op, ReplicaOp::Adopt { shard: to, .. } | ReplicaOp::Name { shard: to, .. } if *to == shard) {
                            answers.push(Answer { seq: *seq, shard, response, vote });
                        }
                        None
                    }
                    // A peer's `Stopping` is about this push, not the
                    // client's request (which this shard applied): never
                    // passed on, or the client would send it again.
                    Ok(Response::Error { code: ErrorCode::Stopping, message }) => Some(err(ErrorCode::Io, format!("metadata shard {shard} ({addr}) is restarting and did not take directory change {seq} yet ({message}); it is kept and reaches that shard when it is back"))),
                    Ok(Response::Error { code, message }) => Some(err(code, format!("metadata shard {shard} ({addr}) did not take directory change {seq}: {message}"))),
                    Ok(other) => Some(err(ErrorCode::Internal, format!("metadata shard {shard} ({addr}) answered a directory change with {other:?}"))),
                    Err(e) => Some(err(ErrorCode::Io, format!("metadata shard {shard} ({addr}) did not take a directory change ({e}); it is kept and reaches that shard when it answers"))),
                };
                match problem {
                    None => acked[p] = *seq,
                    Some(e) => {
                        down[p] = true;
                        failure.get_or_insert(e);
                    }
                }
            }
        }
        self.keep_votes(&answers);
        let settled = store.db().map_err(MetaError::from).and_then(|db| self.settle(&db, &answers));
        if let Err(e) = settled {
            // The targets' answers are lost with it: everything is sent
            // again (each shard answers a resend from its records).
            acked.iter_mut().for_each(|a| *a = 0);
            return Err(e);
        }
        let db = store.db()?;
        let taken = acked.iter().copied().min().unwrap_or(0);
        let unsettled: Vec<u64> = {
            let tx = db.begin_read()?;
            let moving = tx.open_table(MOVING)?;
            let mut v = Vec::new();
            for item in moving.iter()? {
                v.push(Moving::decode(item?.1.value())?.seq);
            }
            v.extend(links_across::unsettled(&tx)?);
            v.extend(name_moves::unsettled(&tx)?);
            v
        };
        let prunable: Vec<u64> = {
            let tx = db.begin_read()?;
            let log = tx.open_table(REPLOG)?;
            let mut v = Vec::new();
            for item in log.range(..=taken)? {
                let seq = item?.0.value();
                if unsettled.contains(&seq) {
                    break;
                }
                v.push(seq);
            }
            v
        };
        if !prunable.is_empty() {
            let tx = db.begin_write()?;
            {
                let mut log = tx.open_table(REPLOG)?;
                for seq in prunable {
                    log.remove(seq)?;
                }
            }
            links_across::forget_unnamed(&tx, taken)?;
            tx.commit()?;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A batch changed entries of these directories: those another shard
    /// is the home of are told about at the next [`Shards::send_touches`]
    /// (their stats are answered there).
    pub(super) fn touched(&self, dirs: Vec<(FileId, i64)>) {
        if !self.sharded() {
            return;
        }
        let mut t = self.touches.lock().unwrap_or_else(PoisonError::into_inner);
        for (dir, at) in dirs {
            if home_shard(dir, self.place.count) == self.place.index {
                continue;
            }
            // Bounded: past it, the oldest news is what gets lost.
            if t.len() >= 4 * weft_wire::msg::replica::MAX_TOUCHED && !t.contains_key(&dir) {
                continue;
            }
            let e = t.entry(dir).or_insert(at);
            *e = (*e).max(at);
        }
    }

    /// Logs and pushes what [`Shards::touched`] gathered (a directory's
    /// times lag the entries other shards change by about this cadence).
    /// While a shard has not taken [`TOUCH_BACKLOG`] changes of the log (it
    /// is down), the times wait here, merged (latest per directory), rather
    /// than fill the log one `Touch` a second; so do they when logging
    /// them fails.
    pub(super) fn send_touches(&self, store: &super::store::Store) -> Result<()> {
        use redb::ReadableTableMetadata;
        let dirs: Vec<(FileId, i64)> = std::mem::take(&mut *self.touches.lock().unwrap_or_else(PoisonError::into_inner)).into_iter().collect();
        if dirs.is_empty() {
            return Ok(());
        }
        let logged = (|| -> Result<bool> {
            let db = store.db()?;
            if db.begin_read()?.open_table(REPLOG)?.len()? >= TOUCH_BACKLOG {
                return Ok(false);
            }
            let tx = db.begin_write()?;
            for chunk in dirs.chunks(weft_wire::msg::replica::MAX_TOUCHED) {
                self.log(&tx, &ReplicaOp::Touch { dirs: chunk.to_vec() })?;
            }
            tx.commit()?;
            Ok(true)
        })();
        match logged {
            Ok(true) => self.push(store),
            Ok(false) => {
                self.touched(dirs);
                Ok(())
            }
            Err(e) => {
                self.touched(dirs);
                Err(e)
            }
        }
    }

    /// Keeps the votes for the rmdirs and renames that wait for them.
    fn keep_votes(&self, answers: &[Answer]) {
        let mut votes = self.votes.lock().unwrap_or_else(PoisonError::into_inner);
        // A request that gave up (or a resend after a restart) leaves its
        // votes: bounded.
        while votes.len() > 4096 {
            let oldest = *votes.keys().min().expect("not empty");
            votes.remove(&oldest);
        }
        for a in answers.iter().filter(|a| a.vote) {
            votes.entry(a.seq).or_default().push((a.shard, a.response.clone()));
        }
    }

    /// The shards that voted on the change at `seq`, and their votes
    /// (`Ok` or `Refused`).
    pub(super) fn take_votes(&self, seq: u64) -> Vec<(u32, Response)> {
        self.votes.lock().unwrap_or_else(PoisonError::into_inner).remove(&seq).unwrap_or_default()
    }

    /// Finishes the renames across shards whose target answered: the
    /// source entry goes if the target took the file (requests by its id are
    /// sent on there from now), else the rename is undone (nothing moved).
    fn settle(&self, db: &redb::Database, answers: &[Answer]) -> Result<()> {
        let answers: Vec<&Answer> = answers.iter().filter(|a| !a.vote).collect();
        if answers.is_empty() {
            return Ok(());
        }
        super::tables::CHANGED_DIRS.with(|c| c.borrow_mut().clear());
        let tx = db.begin_write()?;
        let mut moved_out = Vec::new();
        let mut settled = Vec::new();
        {
            let mut moving = tx.open_table(MOVING)?;
            let records: Vec<(u64, Moving)> = moving.iter()?.map(|item| item.map_err(MetaError::from).and_then(|(k, v)| Ok((k.value(), Moving::decode(v.value())?)))).collect::<Result<_>>()?;
            for (id, m) in records {
                let Some(answer) = answers.iter().find(|a| a.seq == m.seq) else { continue };
                moving.remove(id)?;
                settled.push((m.seq, answer.response.clone()));
                if !matches!(answer.response, Response::Renamed { .. }) {
                    continue;
                }
                let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
                if t.child(m.parent.0, &m.name)? == Some(id) {
                    t.dirents.remove((m.parent.0, m.name.as_str()))?;
                    if t.inodes.get(m.parent.0)?.is_some() {
                        t.entries_changed(m.parent.0, 0, super::tables::now_ns())?;
                    }
                }
                t.inodes.remove(id)?;
                tx.open_table(super::tables::LINKS)?.remove(id)?;
                tx.open_table(MOVED)?.insert(id, answer.shard)?;
                moved_out.push(FileId(id));
            }
        }
        settled.extend(links_across::settle(&tx, &answers)?);
        settled.extend(name_moves::settle(&tx, self, &answers)?);
        tx.commit()?;
        self.touched(super::tables::CHANGED_DIRS.with(|c| std::mem::take(&mut *c.borrow_mut())));
        for id in moved_out {
            self.sizes.moved_out(id);
        }
        let mut map = self.settled.lock().unwrap_or_else(PoisonError::into_inner);
        // Requests that gave up waiting leave theirs: bounded.
        if map.len() > 4096 {
            map.clear();
        }
        map.extend(settled);
        Ok(())
    }

    /// The target's answer to the rename whose `Adopt` is `seq`, once settled.
    pub(super) fn take_settled(&self, seq: u64) -> Option<Response> {
        self.settled.lock().unwrap_or_else(PoisonError::into_inner).remove(&seq)
    }

    /// Whether this shard's log holds anything.
    pub(super) fn log_pending(&self, db: &redb::Database) -> bool {
        let pending = || -> Result<bool> { Ok(db.begin_read()?.open_table(REPLOG)?.first()?.is_some()) };
        self.sharded() && pending().unwrap_or(false)
    }

    /// Applies a change another shard pushed, once: a sequence number
    /// already applied is answered as before without applying it again.
    pub(super) fn apply(&self, tx: &WriteTransaction, coord: u32, seq: u64, op: &ReplicaOp) -> Result<Response> {
        let mut applied = tx.open_table(APPLIED)?;
        let last = applied.get(coord)?.map_or(0, |v| v.value());
        if seq <= last {
            // A resend (the answer was lost): a Mark's answer is whether
            // the mark stands.
            return Ok(match op {
                ReplicaOp::Mark { dir } if tx.open_table(MARKED)?.get(dir.0)?.is_none() => refused(ErrorCode::NotEmpty, "refused before"),
                ReplicaOp::PrepareMove(m) if !dir_moves::holds(tx, m.dir, coord, seq)? => refused(ErrorCode::Busy, "this directory rename was refused before, or is over"),
                ReplicaOp::Adopt { shard, .. } if *shard == self.place.index => match tx.open_table(ADOPTED)?.get((coord, seq))?.map(|v| v.value()) {
                    // Settled before: answered as the first time (a replaced
                    // file's objects are the service's to delete).
                    Some(1) => Response::Renamed { replaced: None },
                    _ => refused(ErrorCode::Busy, "this rename was refused before"),
                },
                ReplicaOp::Name { shard, .. } if *shard == self.place.index => links_across::answer_again(tx.open_table(ADOPTED)?.get((coord, seq))?.is_some_and(|v| v.value() == 1)),
                _ => Response::Ok,
            });
        }
        if seq != last + 1 {
            return Err(err(ErrorCode::Internal, format!("directory change {seq} of shard {coord} arrived after {last}: a change is missing")));
        }
        // Checked before anything is written (the batch commits the rest).
        self.check_op(coord, op)?;
        applied.insert(coord, seq)?;
        drop(applied);
        if let ReplicaOp::Adopt { shard, cred, to, attr, target } = op {
            if *shard != self.place.index {
                return Ok(Response::Ok);
            }
            let r = super::entries::adopt(tx, self, *cred, to, attr, target.as_deref());
            if let Err(e) = &r
                && e.storage
            {
                return Err(e.duplicate());
            }
            tx.open_table(ADOPTED)?.insert((coord, seq), u8::from(r.is_ok()))?;
            return Ok(match r {
                Ok(replaced) => Response::Renamed { replaced: replaced.map(|a| (a.clone(), weft_wire::Capability::none(a.id))) },
                Err(e) => refused(e.code, e.message),
            });
        }
        match op {
            ReplicaOp::Name { shard, parent, cred, to, attr, replace } if *shard == self.place.index => {
                let r = links_across::take_name(tx, self, (coord, seq), *parent, *cred, to, attr, *replace)?;
                tx.open_table(ADOPTED)?.insert((coord, seq), u8::from(r.is_ok()))?;
                return Ok(match r {
                    Err(e) => refused(e.code, e.message),
                    Ok(None) => Response::Ok,
                    Ok(Some(a)) => Response::Renamed { replaced: Some((a.clone(), weft_wire::Capability::none(a.id))) },
                });
            }
            ReplicaOp::Unname { shard, parent, name, file, time_ns } if *shard == self.place.index => {
                links_across::drop_name(tx, coord, *parent, name, *file, *time_ns)?;
                return Ok(Response::Ok);
            }
            ReplicaOp::Unlink { shard, parent, name, file, made, .. } if *shard == self.place.index => {
                links_across::drop_copy(tx, self.owns(*parent, name), *parent, name, *file, *made)?;
                return Ok(Response::Ok);
            }
            ReplicaOp::Name { .. } | ReplicaOp::Unname { .. } | ReplicaOp::Unlink { .. } => return Ok(Response::Ok),
            _ => {}
        }
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        match op {
            ReplicaOp::Mkdir { parent, name, attr } => {
                t.inodes.insert(attr.id.0, encode_attr(attr).as_slice())?;
                t.dirents.insert((parent.0, name.as_str()), attr.id.0)?;
                if t.inodes.get(parent.0)?.is_some() {
                    t.entries_changed_since(parent.0, 1, attr.ctime_ns)?;
                }
            }
            ReplicaOp::SetAttr { dir, mode, uid, gid, mtime_ns, ctime_ns } => {
                let old = t.inodes.get(dir.0)?.map(|v| decode_attr(v.value())).transpose()?;
                if let Some(mut a) = old {
                    (a.mode, a.uid, a.gid, a.mtime_ns, a.ctime_ns) = (*mode, *uid, *gid, *mtime_ns, *ctime_ns);
                    t.inodes.insert(dir.0, encode_attr(&a).as_slice())?;
                }
            }
            ReplicaOp::Mark { dir } => {
                if self.holds_entries_of(&t, *dir)? {
                    return Ok(refused(ErrorCode::NotEmpty, format!("shard {} holds entries of directory {}", self.place.index, dir.0)));
                }
                if dir_moves::involves(tx, *dir)? {
                    return Ok(refused(ErrorCode::Busy, format!("directory {} is part of a rename on shard {}; try again", dir.0, self.place.index)));
                }
                tx.open_table(MARKED)?.insert(dir.0, seq)?;
            }
            ReplicaOp::PrepareMove(m) => {
                drop(t);
                return Ok(dir_moves::prepare(tx, self, coord, seq, m)?.unwrap_or(Response::Ok));
            }
            ReplicaOp::Move { dir, time_ns } => {
                drop(t);
                dir_moves::apply_move(tx, *dir, *time_ns)?;
            }
            ReplicaOp::Unprepare { dir } => {
                drop(t);
                dir_moves::unprepare(tx, *dir)?;
            }
            ReplicaOp::Unmark { dir } => {
                tx.open_table(MARKED)?.remove(dir.0)?;
            }
            ReplicaOp::Adopt { .. } | ReplicaOp::Name { .. } | ReplicaOp::Unname { .. } | ReplicaOp::Unlink { .. } => unreachable!("taken above"),
            ReplicaOp::Touch { dirs } => {
                for (dir, at) in dirs {
                    let old = t.inodes.get(dir.0)?.map(|v| decode_attr(v.value())).transpose()?;
                    // Newer than the last change here (an explicit utimes
                    // since sets ctime too, and stands).
                    if let Some(mut a) = old.filter(|a| a.kind == FileKind::Dir && a.ctime_ns < *at) {
                        a.mtime_ns = a.mtime_ns.max(*at);
                        a.ctime_ns = *at;
                        t.inodes.insert(dir.0, encode_attr(&a).as_slice())?;
                    }
                }
            }
            ReplicaOp::Rmdir { parent, name, dir, time_ns } => {
                if t.child(parent.0, name)? == Some(dir.0) {
                    t.dirents.remove((parent.0, name.as_str()))?;
                    if t.inodes.get(parent.0)?.is_some() {
                        t.entries_changed_since(parent.0, -1, *time_ns)?;
                    }
                }
                // Copies of subdirectories whose own removal from their
                // home shard is still on its way go; an entry this shard
                // keeps cannot be here (its Mark refused), and stays.
                let orphans: Vec<(String, u64)> = t.dirents.range((dir.0, "")..(dir.0 + 1, ""))?.map(|e| e.map(|(k, v)| (k.value().1.to_owned(), v.value()))).collect::<std::result::Result<_, _>>()?;
                let mut copies = Vec::new();
                for (name, id) in orphans {
                    if self.owns(*dir, &name) {
                        tracing::error!(target: "weft::meta", dir = dir.0, name = %name, "a removed directory still has an entry this shard keeps");
                        continue;
                    }
                    t.dirents.remove((dir.0, name.as_str()))?;
                    copies.push((name, FileId(id)));
                }
                t.inodes.remove(dir.0)?;
                drop(t);
                tx.open_table(MARKED)?.remove(dir.0)?;
                // Copies of files' names (links across shards) among them.
                for (name, id) in copies {
                    links_across::drop_orphan_copy(tx, *dir, &name, id)?;
                }
            }
        }
        Ok(Response::Ok)
    }

    /// What a coordinator may push: directories it is the home of, a
    /// rename to a shard that exists.
    fn check_op(&self, coord: u32, op: &ReplicaOp) -> Result<()> {
        let k = self.place.count;
        let dir = match op {
            ReplicaOp::Mkdir { attr, .. } if attr.kind != FileKind::Dir => return Err(err(ErrorCode::BadRequest, format!("shard {coord} pushed a directory that is not one"))),
            ReplicaOp::Mkdir { attr, .. } => attr.id,
            ReplicaOp::SetAttr { dir, .. } | ReplicaOp::Mark { dir } | ReplicaOp::Unmark { dir } | ReplicaOp::Rmdir { dir, .. } => *dir,
            ReplicaOp::Adopt { shard, .. } if *shard >= k => return Err(err(ErrorCode::BadRequest, format!("a rename to shard {shard} of {k}"))),
            ReplicaOp::Name { shard, .. } | ReplicaOp::Unname { shard, .. } | ReplicaOp::Unlink { shard, .. } if *shard >= k => return Err(err(ErrorCode::BadRequest, format!("a name on shard {shard} of {k}"))),
            // Only the name's own shard replaces it.
            ReplicaOp::Unlink { parent, name, .. } if weft_wire::shard::entry_shard(*parent, name, k) != coord => {
                return Err(err(ErrorCode::BadRequest, format!("shard {coord} pushed the replacement of a name shard {} keeps", weft_wire::shard::entry_shard(*parent, name, k))));
            }
            ReplicaOp::Adopt { .. } | ReplicaOp::Touch { .. } | ReplicaOp::Name { .. } | ReplicaOp::Unname { .. } | ReplicaOp::Unlink { .. } => return Ok(()),
            ReplicaOp::PrepareMove(_) | ReplicaOp::Move { .. } | ReplicaOp::Unprepare { .. } if coord != dir_moves::RENAMER => {
                return Err(err(ErrorCode::BadRequest, format!("shard {coord} pushed a directory rename, which only shard {} makes", dir_moves::RENAMER)));
            }
            ReplicaOp::PrepareMove(_) | ReplicaOp::Move { .. } | ReplicaOp::Unprepare { .. } => return Ok(()),
        };
        if home_shard(dir, k) != coord {
            return Err(err(ErrorCode::BadRequest, format!("shard {coord} pushed a change of directory {}, which shard {} keeps", dir.0, home_shard(dir, k))));
        }
        Ok(())
    }

    /// Whether this shard keeps an entry of `dir` (not the copies of
    /// subdirectories other shards keep).
    pub(super) fn holds_entries_of<I, D>(&self, t: &Tables<I, D>, dir: FileId) -> Result<bool>
    where
        I: ReadableTable<u64, &'static [u8]>,
        D: ReadableTable<(u64, &'static str), u64>,
    {
        for item in t.dirents.range((dir.0, "")..(dir.0 + 1, ""))? {
            let (k, _) = item?;
            if self.owns(dir, k.value().1) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// A pushed change applied by refusing it.
pub(super) fn refused(code: ErrorCode, message: impl Into<String>) -> Response {
    match Response::error(code, message) {
        Response::Error { code, message } => Response::Refused { code, message },
        other => other,
    }
}

/// Refuses a new entry `name` in a directory being removed, or one a
/// directory rename holds.
pub(super) fn check_unmarked(tx: &WriteTransaction, dir: FileId, name: &str, path: &str) -> Result<()> {
    if tx.open_table(MARKED)?.get(dir.0)?.is_some() {
        return Err(err(ErrorCode::NotFound, format!("the directory of {path} is being removed")));
    }
    super::dir_moves::check_free(tx, dir, name, path)
}

/// Refuses a change of a file being renamed to another shard.
pub(super) fn check_not_moving(tx: &WriteTransaction, id: FileId, path: &str) -> Result<()> {
    if tx.open_table(MOVING)?.get(id.0)?.is_some() {
        return Err(err(ErrorCode::Busy, format!("{path} is being renamed to another metadata shard; try again")));
    }
    links_across::check_not_linking(tx, id, path)?;
    name_moves::check_not_moving_name(tx, id, path)
}

/// Where a file that is not here went, if it was renamed away.
pub(super) fn moved_to(db: &redb::Database, id: FileId) -> Result<Option<u32>> {
    Ok(db.begin_read()?.open_table(MOVED)?.get(id.0)?.map(|v| v.value()))
}

/// Records a rename across shards on its source shard, in `tx` with its
/// `Adopt` (logged): the file is changed no further here until settled.
pub(super) fn start_moving(tx: &WriteTransaction, id: FileId, m: &Moving) -> Result<()> {
    tx.open_table(MOVING)?.insert(id.0, m.encode().as_slice())?;
    Ok(())
}

/// Directories this shard marked for removal (an rmdir cut short by a
/// stop): they are unmarked when it starts.
pub(super) fn own_marks(db: &redb::Database, shards: &Shards) -> Result<Vec<FileId>> {
    let tx = db.begin_read()?;
    let marked = tx.open_table(MARKED)?;
    let mut v = Vec::new();
    for item in marked.iter()? {
        let (k, _) = item?;
        if home_shard(FileId(k.value()), shards.place.count) == shards.place.index {
            v.push(FileId(k.value()));
        }
    }
    Ok(v)
}

impl From<std::io::Error> for MetaError {
    fn from(e: std::io::Error) -> Self {
        err(ErrorCode::Io, e.to_string())
    }
}
