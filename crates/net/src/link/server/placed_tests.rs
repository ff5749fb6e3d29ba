//! Unit tests of payloads placed in a shared area (`Cts` naming a place,
//! answered `Placed`), with an area over plain memory.

use super::tests::{drain, feed, frame, ready, write_req, Conn};
use super::*;
use crate::transport::area::{self, CHARGE_STEP};
use weft_wire::Grant;

/// A ready connection with an area of `len` bytes drawn from a budget of
/// `budget` bytes.
fn with_area(len: usize, budget: u64) -> (Conn, Arc<Area>) {
    let a = area::in_memory(len, MemoryBudget::new(budget));
    (ready(ConnLimits::default(), 64 << 20).with_area(Some(a.clone())), a)
}

/// The grants sent: (message id, place in the area).
fn grants(c: &mut Conn) -> Vec<(u64, Option<u64>)> {
    drain(c).into_iter().filter(|f| f.0 == FrameKind::Cts).map(|f| (f.1, Grant::decode(&f.2).unwrap().area_at)).collect()
}

/// Announces a write of `len` bytes as message `id`.
fn announce(c: &mut Conn, id: u64, len: usize, ev: &mut Vec<Event>) {
    feed(c, &frame(FrameKind::Rts, id, &write_req(len as u64), len, &[]), ev);
}

#[test]
fn a_write_is_placed_and_served_from_the_area() {
    let (mut c, a) = with_area(1 << 20, 8 << 20);
    let mut ev = Vec::new();
    announce(&mut c, 1, 5000, &mut ev);
    announce(&mut c, 2, 3000, &mut ev);
    let g = grants(&mut c);
    assert_eq!(g, [(1, Some(0)), (2, Some(8192))], "lowest free places, whole pages");
    let bytes: Vec<u8> = (0..3000u32).map(|i| (i % 253) as u8).collect();
    area::fill(&a, 8192, &bytes);
    feed(&mut c, &frame(FrameKind::Placed, 2, &[], 0, &[]), &mut ev);
    let Some(Event::Request { id: MsgId(2), payload, .. }) = ev.pop() else { panic!("no request") };
    assert!(payload.bytes.is_empty() && payload.len() == 3000);
    assert_eq!(payload.data(), &bytes[..]);
    assert!(payload.charge.as_ref().is_some_and(|ch| ch.bytes() >= 3000), "the grant's memory goes with it");
    // Its place comes back when the request is done: the next grant takes it.
    drop(payload);
    announce(&mut c, 3, 4096, &mut ev);
    assert_eq!(grants(&mut c), [(3, Some(8192))]);
    assert!(c.closing().is_none());
}

#[test]
fn only_opaque_payloads_that_fit_are_placed() {
    let (mut c, _a) = with_area(64 << 10, 8 << 20);
    let mut ev = Vec::new();
    // A payload the server reads (not only copies) comes through the ring.
    feed(&mut c, &frame(FrameKind::Rts, 1, &Request::Ping.encode(), 5000, &[]), &mut ev);
    // One larger than the area, then one that fits.
    announce(&mut c, 2, 100_000, &mut ev);
    announce(&mut c, 3, 60_000, &mut ev);
    // The area is full now: the next comes through the ring.
    announce(&mut c, 4, 10_000, &mut ev);
    assert_eq!(grants(&mut c), [(1, None), (2, None), (3, Some(0)), (4, None)]);
    // Without an area (TCP), nothing is placed.
    let mut t = ready(ConnLimits::default(), 64 << 20);
    announce(&mut t, 1, 5000, &mut ev);
    assert_eq!(grants(&mut t), [(1, None)]);
}

#[test]
fn an_area_past_its_budget_places_nothing_more() {
    // Budget for one step of the high-water mark.
    let (mut c, a) = with_area(4 << 20, CHARGE_STEP);
    let mut ev = Vec::new();
    announce(&mut c, 1, 1 << 20, &mut ev);
    announce(&mut c, 2, 1 << 20, &mut ev);
    assert_eq!(grants(&mut c), [(1, Some(0)), (2, None)]);
    assert_eq!(a.charged(), CHARGE_STEP);
}

#[test]
fn placed_and_data_frames_must_match_their_grant() {
    let mut ev = Vec::new();
    // `Data` for a payload granted a place.
    let (mut c, _a) = with_area(1 << 20, 8 << 20);
    announce(&mut c, 1, 5000, &mut ev);
    grants(&mut c);
    feed(&mut c, &frame(FrameKind::Data, 1, &[], 5000, &[0; 5000]), &mut ev);
    assert!(c.closing().is_some_and(|w| w.0.contains("does not match a grant")), "{:?}", c.closing());
    // `Placed` for a payload granted through the ring.
    let (mut c, _a) = with_area(1 << 20, 8 << 20);
    feed(&mut c, &frame(FrameKind::Rts, 1, &Request::Ping.encode(), 5000, &[]), &mut ev);
    grants(&mut c);
    feed(&mut c, &frame(FrameKind::Placed, 1, &[], 0, &[]), &mut ev);
    assert!(c.closing().is_some_and(|w| w.0.contains("not granted a place")), "{:?}", c.closing());
    // `Placed` for a message never announced, or with bytes after it.
    for (id, pay) in [(9, 0usize), (1, 10)] {
        let (mut c, _a) = with_area(1 << 20, 8 << 20);
        announce(&mut c, 1, 5000, &mut ev);
        grants(&mut c);
        feed(&mut c, &frame(FrameKind::Placed, id, &[], pay, &vec![0; pay]), &mut ev);
        assert!(c.closing().is_some(), "Placed {id} with {pay} bytes");
    }
    // The same `Placed` twice.
    let (mut c, _a) = with_area(1 << 20, 8 << 20);
    announce(&mut c, 1, 5000, &mut ev);
    grants(&mut c);
    feed(&mut c, &frame(FrameKind::Placed, 1, &[], 0, &[]), &mut ev);
    assert!(c.closing().is_none() && matches!(ev.pop(), Some(Event::Request { id: MsgId(1), .. })));
    feed(&mut c, &frame(FrameKind::Placed, 1, &[], 0, &[]), &mut ev);
    assert!(c.closing().is_some(), "a second Placed for one grant");
    // Parts for a placed payload.
    let (c, _a) = with_area(1 << 20, 8 << 20);
    let mut c = c.with_rail_token([4; RAIL_TOKEN_LEN]);
    announce(&mut c, 1, 5000, &mut ev);
    grants(&mut c);
    let head = PartHead { token: RailToken([4; RAIL_TOKEN_LEN]), offset: 0 }.encode();
    feed(&mut c, &frame(FrameKind::Part, 1, &head, 100, &[0; 100]), &mut ev);
    assert!(c.closing().is_some_and(|w| w.0.contains("placed")), "{:?}", c.closing());
    assert!(ev.iter().all(|e| !matches!(e, Event::Request { .. })), "nothing served");
}

#[test]
fn places_held_by_requests_outlive_their_connection() {
    let (mut c, a) = with_area(1 << 20, 8 << 20);
    let mut ev = Vec::new();
    announce(&mut c, 1, 5000, &mut ev);
    announce(&mut c, 2, 5000, &mut ev);
    grants(&mut c);
    area::fill(&a, 0, &[9; 5000]);
    feed(&mut c, &frame(FrameKind::Placed, 1, &[], 0, &[]), &mut ev);
    let Some(Event::Request { payload, .. }) = ev.pop() else { panic!("no request") };
    // The connection goes (message 2's place with it); the request's stays.
    drop(c);
    drop(a);
    assert_eq!(payload.data(), &[9; 5000][..]);
}
