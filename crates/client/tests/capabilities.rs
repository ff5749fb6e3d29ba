//! Data servers enforce what the metadata service decided (issue 11):
//! every data request carries a capability, and one without a valid
//! capability for its file and operation is refused with a typed error,
//! before any of its data is accepted. Clients renew their capabilities,
//! so a file open longer than a capability's lifetime keeps working.

use weft_testkit::TestCluster;
use std::net::SocketAddr;
use std::time::Duration;
use weft_client::{CreateOptions, Error};
use weft_launch::ClusterSpec;
use weft_net::{Call, Endpoint, EndpointConfig};
use weft_wire::{rights, Capability, Cred, DataReq, ErrorCode, FileId, Piece, Request, Response};

/// Capabilities live 2 s here: long enough for a request, short enough to
/// watch one expire.
const LIFETIME_S: u64 = 2;

fn cluster(name: &str) -> TestCluster {
    let spec = ClusterSpec { data_servers: 1, server_env: vec![("WEFT_CAP_LIFETIME_S".into(), LIFETIME_S.to_string())], ..ClusterSpec::default() };
    TestCluster::start_spec(name, spec)
}

/// Sends one data request (with `payload`) and returns the answer.
fn send(ep: &Endpoint, addr: SocketAddr, cap: Capability, op: DataReq, payload: &[u8]) -> (Response, Vec<u8>) {
    let mut back = [0u8; 64];
    let mut c = Call::new(addr, Request::data(cap, op).encode());
    c.send = vec![payload];
    c.recv = vec![&mut back[..]];
    ep.run(std::slice::from_mut(&mut c));
    let reply = c.result.expect("ran").expect("the server answers");
    let n = reply.payload_len;
    (Response::decode(&reply.body).unwrap(), back[..n].to_vec())
}

fn refused(r: &Response, why: &str) -> bool {
    matches!(r, Response::Error { code: ErrorCode::Permission, message } if message.contains(why))
}

#[test]
fn data_requests_without_a_valid_capability_are_refused() {
    let tc = cluster("caps");
    let cf = tc.cluster();
    let data = cf.server(cf.data_servers()[0]).unwrap().addr;
    let alice = tc.client().with_cred(Cred::new(1000, 1000));
    let secret = alice.create("/secret", CreateOptions { mode: 0o600, ..Default::default() }).unwrap();
    secret.write_at(0, b"alice's data").unwrap();
    let shared = alice.create("/shared", CreateOptions { mode: 0o644, ..Default::default() }).unwrap();
    shared.write_at(0, b"for all to read").unwrap();
    // Bob may read /shared only; his capability says so.
    let bob = tc.client().with_cred(Cred::new(1001, 1001));
    let theirs = bob.open("/shared", false).unwrap();
    let cap = theirs.capability().unwrap();
    assert_eq!(cap.rights, rights::READ | rights::SIZE);
    assert!(matches!(bob.open("/secret", false), Err(Error::Permission(_))));

    // Bob speaks the protocol himself (he holds the cluster file, as any
    // client in secret mode), with the capabilities he could get.
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let read = |file: FileId| DataReq::Read { file, pieces: vec![Piece { offset: 0, len: 12 }], order: Default::default() };
    let (ok, bytes) = send(&ep, data, cap, read(theirs.id()), &[]);
    assert!(matches!(ok, Response::Read { .. }) && bytes == b"for all to r", "{ok:?}");
    // No capability: the scan of file ids that read every file before.
    let (r, bytes) = send(&ep, data, Capability::none(secret.id()), read(secret.id()), &[]);
    assert!(refused(&r, "not issued"), "{r:?}");
    assert!(bytes.is_empty());
    // Another file's capability.
    let (r, _) = send(&ep, data, cap, read(secret.id()), &[]);
    assert!(refused(&r, "another file"), "{r:?}");
    // Its own file, too few rights: neither a write nor a delete.
    let write = DataReq::Write { file: theirs.id(), pieces: vec![Piece { offset: 0, len: 3 }] };
    let (r, _) = send(&ep, data, cap, write, b"bob");
    assert!(refused(&r, "needs write"), "{r:?}");
    let (r, _) = send(&ep, data, cap, DataReq::Delete { file: theirs.id() }, &[]);
    assert!(refused(&r, "needs delete"), "{r:?}");
    // A delete of an id no file has yet is refused too (it used to
    // tombstone the id, so the file created with it later lost its data).
    let (r, _) = send(&ep, data, cap, DataReq::Delete { file: FileId(theirs.id().0 + 1000) }, &[]);
    assert!(refused(&r, "another file"), "{r:?}");
    // Rights raised by hand: the MAC no longer matches.
    let forged = Capability { rights: rights::READ | rights::WRITE | rights::SIZE, ..cap };
    let (r, _) = send(&ep, data, forged, DataReq::Truncate { file: theirs.id(), size: 0 }, &[]);
    assert!(refused(&r, "not issued"), "{r:?}");
    // Expired (the servers' clock is the judge).
    std::thread::sleep(Duration::from_millis(LIFETIME_S * 1000 + 1100));
    let (r, _) = send(&ep, data, cap, read(theirs.id()), &[]);
    assert!(refused(&r, "expired"), "{r:?}");

    // Nothing was changed, and the servers still serve everyone.
    let mut back = vec![0u8; 15];
    assert_eq!(alice.open("/shared", false).unwrap().read_at(0, &mut back).unwrap(), 15);
    assert_eq!(&back, b"for all to read");
    assert_eq!(alice.stat("/shared").unwrap().1, 15);
}

/// A handle open longer than a capability lives renews it from the
/// metadata service on its own; the renewal checks the file's mode again.
#[test]
fn open_files_renew_their_capabilities() {
    let tc = cluster("caps-renew");
    let c = tc.client().with_cred(Cred::new(1000, 1000));
    let f = c.create("/long", CreateOptions::default()).unwrap();
    let first = f.capability().unwrap();
    f.write_at(0, b"before").unwrap();
    std::thread::sleep(Duration::from_millis(LIFETIME_S * 1000 + 1100));
    // Past the first capability's expiry: writes, reads and fsync work.
    f.write_at(6, b" and after").unwrap();
    f.fsync().unwrap();
    let mut back = vec![0u8; 16];
    assert_eq!(f.read_at(0, &mut back).unwrap(), 16);
    assert_eq!(&back, b"before and after");
    assert_ne!(f.capability().unwrap(), first, "renewed");
    f.close().unwrap();
    // A renewal is an exchange: at most the old rights, less those the
    // mode no longer gives, and never from a file id alone.
    let bob = tc.client().with_cred(Cred::new(1001, 1001));
    let theirs = bob.open("/long", false).unwrap();
    let cf = tc.cluster();
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let renew_at = |cred: Cred, old: Capability, path: &str| weft_testkit::meta_call(&ep, cf.meta_server().addr, cred, weft_wire::MetaReq::Renew { old, path: path.into() });
    let renew = |cred: Cred, old: Capability| renew_at(cred, old, "/long");
    let read = theirs.capability().unwrap();
    assert!(matches!(renew(Cred::new(1001, 1001), read), Response::Cap(c) if c.rights == rights::READ | rights::SIZE && c.file == read.file));
    let widened = Capability { rights: rights::READ | rights::WRITE | rights::SIZE, ..read };
    assert!(matches!(renew(Cred::new(1001, 1001), widened), Response::Error { code: ErrorCode::Permission, .. }), "a widened capability was renewed");
    // A file in a directory Bob cannot search: no genuine capability, no
    // renewal (its mode alone would let him read it).
    c.mkdir("/private", 0o700).unwrap();
    let hidden = c.create("/private/f", CreateOptions { mode: 0o644, ..Default::default() }).unwrap();
    assert!(matches!(bob.open("/private/f", false), Err(Error::Permission(_))));
    let guessed = Capability::none(hidden.id());
    assert!(matches!(renew_at(Cred::new(1001, 1001), guessed, "/private/f"), Response::Error { code: ErrorCode::Permission, .. }));
    // A mode change reaches a renewal: Bob's read right goes, the owner's
    // write right stays (an owner keeps writing a file made read-only).
    let owner = c.open("/long", true).unwrap();
    c.chmod("/long", 0o400).unwrap();
    assert!(matches!(renew(Cred::new(1001, 1001), read), Response::Cap(c) if c.rights == rights::SIZE));
    assert!(matches!(renew(Cred::new(1000, 1000), owner.capability().unwrap()), Response::Cap(c) if c.rights == rights::READ | rights::WRITE | rights::SIZE));
}

/// A renewal walks the path again (issue 25, item 2): a directory made
/// 0700 after Bob opened a file in it ends Bob's access at his next
/// renewal, within one capability lifetime, though the file's own mode
/// still lets him read it; and a name that no longer names the file
/// renews only for its owner.
#[test]
fn a_directory_closed_after_an_open_revokes_at_the_next_renewal() {
    let tc = cluster("caps-dir");
    let alice = tc.client().with_cred(Cred::new(1000, 1000));
    let bob = tc.client().with_cred(Cred::new(1001, 1001));
    alice.mkdir("/proj", 0o755).unwrap();
    let f = alice.create("/proj/data", CreateOptions { mode: 0o644, ..Default::default() }).unwrap();
    f.write_at(0, b"shared for a while").unwrap();
    f.close().unwrap();
    let theirs = bob.open("/proj/data", false).unwrap();
    let mut buf = [0u8; 18];
    assert_eq!(theirs.read_at(0, &mut buf).unwrap(), 18);
    alice.chmod("/proj", 0o700).unwrap();
    // Within the capability's life Bob's handle reads (as POSIX keeps an
    // open descriptor's access); past its half-life the renewal is refused.
    std::thread::sleep(Duration::from_millis(LIFETIME_S * 1000 / 2 + 600));
    match theirs.read_at(0, &mut buf) {
        Err(Error::Permission(m)) => assert!(m.contains("no longer lets you search"), "{m}"),
        other => panic!("a read past the renewal after the directory closed: {other:?}"),
    }
    // The owner's own handle renews (she may search her directory).
    let hers = alice.open("/proj/data", false).unwrap();
    std::thread::sleep(Duration::from_millis(LIFETIME_S * 1000 / 2 + 600));
    assert_eq!(hers.read_at(0, &mut buf).unwrap(), 18);
    // A made-up name does not get round the walk, not even for a file's
    // owner: Bob's own file in Alice's closed directory, renewed by a
    // path he may search, is refused.
    alice.chmod("/proj", 0o777).unwrap();
    let his = bob.create("/proj/bobs", CreateOptions { mode: 0o644, ..Default::default() }).unwrap();
    let cap = his.capability().unwrap();
    alice.chmod("/proj", 0o700).unwrap();
    let cf = tc.cluster();
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let renew_at = |path: &str| weft_testkit::meta_call(&ep, cf.meta_server().addr, Cred::new(1001, 1001), weft_wire::MetaReq::Renew { old: cap, path: path.into() });
    for made_up in ["/nope", "/bobs", "/proj/bobs"] {
        assert!(matches!(renew_at(made_up), Response::Error { code: ErrorCode::Permission, .. }), "Bob renewed his file in a closed directory by {made_up}");
    }
    // A name that no longer names the file: renewals by it are refused,
    // the owner's too; root's go on.
    alice.chmod("/proj", 0o755).unwrap();
    let theirs = bob.open("/proj/data", false).unwrap();
    let hers = alice.open("/proj/data", false).unwrap();
    let roots = tc.client().with_cred(Cred::new(0, 0)).open("/proj/data", false).unwrap();
    alice.rename("/proj/data", "/proj/moved").unwrap();
    std::thread::sleep(Duration::from_millis(LIFETIME_S * 1000 / 2 + 600));
    for (who, h) in [("Bob", &theirs), ("Alice", &hers)] {
        match h.read_at(0, &mut buf) {
            Err(Error::Permission(m)) => assert!(m.contains("no longer names this file"), "{who}: {m}"),
            other => panic!("{who}'s read by a stale name past the renewal: {other:?}"),
        }
    }
    assert_eq!(roots.read_at(0, &mut buf).unwrap(), 18);
    // Told the new name (as a mount tells its handles), Bob's renews.
    let theirs = bob.open("/proj/moved", false).unwrap();
    alice.rename("/proj/moved", "/proj/again").unwrap();
    theirs.renamed("/proj/again");
    std::thread::sleep(Duration::from_millis(LIFETIME_S * 1000 / 2 + 600));
    assert_eq!(theirs.read_at(0, &mut buf).unwrap(), 18);
}
