//! Datatypes against a reference written straight from MPI's definitions:
//! every constructor expands to its typemap element by element, and
//! flattening, size, bounds and true bounds must match it.

use proptest::prelude::*;
use weft_layout::{sort_and_coalesce, Datatype, TypeError};

#[derive(Debug, Clone)]
enum Spec {
    Basic(u64),
    Contig(i64, Box<Spec>),
    Vector(i64, i64, i64, Box<Spec>),
    Hvector(i64, i64, i64, Box<Spec>),
    Indexed(Vec<(i64, i64)>, Box<Spec>),
    Hindexed(Vec<(i64, i64)>, Box<Spec>),
    IndexedBlock(i64, Vec<i64>, Box<Spec>),
    Struct(Vec<(i64, i64, Spec)>),
    Resized(i64, i64, Box<Spec>),
}

/// The reference: the full typemap (one entry per basic element) and bounds.
#[derive(Debug, Clone)]
struct Ref {
    map: Vec<(i64, u64)>,
    lb: i64,
    ub: i64,
}

impl Ref {
    fn extent(&self) -> i64 {
        self.ub - self.lb
    }
    fn size(&self) -> u64 {
        self.map.iter().map(|e| e.1).sum()
    }
    fn empty(&self) -> bool {
        self.size() == 0 && self.extent() == 0
    }
}

/// Places child instances at the given displacements, MPI style.
fn place(parts: Vec<(i64, Ref)>) -> Ref {
    let mut map = Vec::new();
    let (mut lb, mut ub) = (i64::MAX, i64::MIN);
    for (d, r) in parts {
        if r.empty() {
            continue;
        }
        map.extend(r.map.iter().map(|&(o, l)| (o + d, l)));
        lb = lb.min(d + r.lb);
        ub = ub.max(d + r.ub);
    }
    if lb == i64::MAX { Ref { map, lb: 0, ub: 0 } } else { Ref { map, lb, ub } }
}

fn reference(s: &Spec) -> Ref {
    match s {
        Spec::Basic(n) => Ref { map: vec![(0, *n)], lb: 0, ub: *n as i64 },
        Spec::Contig(c, t) => {
            let r = reference(t);
            place((0..*c).map(|i| (i * r.extent(), r.clone())).collect())
        }
        Spec::Vector(c, b, st, t) => {
            let r = reference(t);
            place((0..*c).flat_map(|j| (0..*b).map(move |k| j * st + k)).map(|e| (e * r.extent(), r.clone())).collect())
        }
        Spec::Hvector(c, b, st, t) => {
            let r = reference(t);
            place((0..*c).flat_map(|j| (0..*b).map(move |k| (j, k))).map(|(j, k)| (j * st + k * r.extent(), r.clone())).collect())
        }
        Spec::Indexed(blocks, t) => {
            let r = reference(t);
            place(blocks.iter().flat_map(|&(bl, d)| (0..bl).map(move |k| d + k)).map(|e| (e * r.extent(), r.clone())).collect())
        }
        Spec::Hindexed(blocks, t) => {
            let r = reference(t);
            place(blocks.iter().flat_map(|&(bl, d)| (0..bl).map(move |k| (d, k))).map(|(d, k)| (d + k * r.extent(), r.clone())).collect())
        }
        Spec::IndexedBlock(bl, ds, t) => reference(&Spec::Indexed(ds.iter().map(|&d| (*bl, d)).collect(), t.clone())),
        Spec::Struct(blocks) => {
            let mut parts = Vec::new();
            for (bl, d, t) in blocks {
                let r = reference(t);
                for k in 0..*bl {
                    parts.push((d + k * r.extent(), r.clone()));
                }
            }
            place(parts)
        }
        Spec::Resized(lb, ext, t) => Ref { map: reference(t).map, lb: *lb, ub: lb + ext },
    }
}

fn build(s: &Spec) -> Datatype {
    match s {
        Spec::Basic(n) => Datatype::basic(*n),
        Spec::Contig(c, t) => Datatype::contiguous(*c, &build(t)).unwrap(),
        Spec::Vector(c, b, st, t) => Datatype::vector(*c, *b, *st, &build(t)).unwrap(),
        Spec::Hvector(c, b, st, t) => Datatype::hvector(*c, *b, *st, &build(t)).unwrap(),
        Spec::Indexed(blocks, t) => {
            let (bl, d): (Vec<i64>, Vec<i64>) = blocks.iter().copied().unzip();
            Datatype::indexed(&bl, &d, &build(t)).unwrap()
        }
        Spec::Hindexed(blocks, t) => {
            let (bl, d): (Vec<i64>, Vec<i64>) = blocks.iter().copied().unzip();
            Datatype::hindexed(&bl, &d, &build(t)).unwrap()
        }
        Spec::IndexedBlock(bl, ds, t) => Datatype::indexed_block(*bl, ds, &build(t)).unwrap(),
        Spec::Struct(blocks) => {
            let bl: Vec<i64> = blocks.iter().map(|b| b.0).collect();
            let d: Vec<i64> = blocks.iter().map(|b| b.1).collect();
            let ts: Vec<Datatype> = blocks.iter().map(|b| build(&b.2)).collect();
            Datatype::structure(&bl, &d, &ts).unwrap()
        }
        Spec::Resized(lb, ext, t) => Datatype::resized(&build(t), *lb, *ext).unwrap(),
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let leaf = prop_oneof![Just(Spec::Basic(1)), Just(Spec::Basic(2)), Just(Spec::Basic(4)), Just(Spec::Basic(8))];
    leaf.prop_recursive(3, 24, 4, |inner| {
        let b = inner.clone().prop_map(Box::new);
        prop_oneof![
            (0i64..4, b.clone()).prop_map(|(c, t)| Spec::Contig(c, t)),
            (0i64..4, 0i64..3, -4i64..5, b.clone()).prop_map(|(c, bl, s, t)| Spec::Vector(c, bl, s, t)),
            (0i64..4, 0i64..3, -40i64..41, b.clone()).prop_map(|(c, bl, s, t)| Spec::Hvector(c, bl, s, t)),
            (proptest::collection::vec((0i64..3, -5i64..6), 0..4), b.clone()).prop_map(|(v, t)| Spec::Indexed(v, t)),
            (proptest::collection::vec((0i64..3, -50i64..51), 0..4), b.clone()).prop_map(|(v, t)| Spec::Hindexed(v, t)),
            (0i64..3, proptest::collection::vec(-5i64..6, 0..4), b.clone()).prop_map(|(bl, v, t)| Spec::IndexedBlock(bl, v, t)),
            proptest::collection::vec((0i64..3, -30i64..31, inner.clone()), 0..4).prop_map(Spec::Struct),
            (-20i64..21, 1i64..40, b).prop_map(|(lb, e, t)| Spec::Resized(lb, e, t)),
        ]
    })
}

/// Joins touching neighbours, keeping typemap order.
fn coalesce_in_order(map: &[(i64, u64)]) -> Vec<(i64, u64)> {
    let mut out: Vec<(i64, u64)> = Vec::new();
    for &(o, l) in map {
        match out.last_mut() {
            Some((po, pl)) if *po + *pl as i64 == o => *pl += l,
            _ => out.push((o, l)),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn flattening_and_bounds_match_the_reference(s in spec(), disp in -100i64..100, count in 1u64..3) {
        let t = build(&s);
        let r = reference(&s);
        prop_assert_eq!(t.size(), r.size(), "size");
        prop_assert_eq!((t.lb(), t.ub()), (r.lb, r.ub), "lb, ub");
        prop_assert_eq!(t.extent(), r.extent());
        if r.size() > 0 {
            let tlb = r.map.iter().map(|e| e.0).min().unwrap();
            let tub = r.map.iter().map(|e| e.0 + e.1 as i64).max().unwrap();
            prop_assert_eq!((t.true_lb(), t.true_extent()), (tlb, tub - tlb), "true bounds");
        }
        let shifted: Vec<(i64, u64)> = r.map.iter().map(|&(o, l)| (o + disp, l)).collect();
        prop_assert_eq!(t.regions(disp).collect::<Vec<_>>(), coalesce_in_order(&shifted), "regions of one copy");
        // count copies, one extent apart, through `flatten`.
        let ext = r.extent();
        let copies: Vec<(i64, u64)> = (0..count as i64).flat_map(|i| shifted.iter().map(move |&(o, l)| (o + i * ext, l))).collect();
        let want = if r.empty() { Vec::new() } else { coalesce_in_order(&copies) };
        prop_assert_eq!(t.flatten(count, disp), want.clone(), "flatten count");
        // Runs expand to the same bytes.
        let from_runs: Vec<(i64, u64)> = t.runs(disp).flat_map(|r| (0..r.count).map(move |i| (r.offset + i as i64 * r.stride, r.len))).collect();
        prop_assert_eq!(coalesce_in_order(&from_runs), coalesce_in_order(&shifted));
        // Dense means one region.
        if t.is_dense() && t.size() > 0 {
            prop_assert_eq!(t.regions(0).count(), 1);
        }
        prop_assert_eq!(sort_and_coalesce(t.regions(disp).collect()), sort_and_coalesce(shifted));
    }
}

#[test]
fn a_billion_element_vector_costs_its_description() {
    let v = Datatype::vector(1_000_000_000, 1, 2, &Datatype::double()).unwrap();
    assert_eq!(v.size(), 8_000_000_000);
    let runs: Vec<_> = v.runs(0).collect();
    assert_eq!(runs.len(), 1, "one strided run");
    assert_eq!((runs[0].len, runs[0].stride, runs[0].count), (8, 16, 1_000_000_000));
    let first: Vec<_> = v.regions(100).take(3).collect();
    assert_eq!(first, [(100, 8), (116, 8), (132, 8)]);
    let c = Datatype::contiguous(1_000_000_000, &Datatype::double()).unwrap();
    assert_eq!(c.regions(0).collect::<Vec<_>>(), [(0, 8_000_000_000)]);
}

#[test]
fn invalid_constructions_are_typed_errors() {
    let d = Datatype::double();
    assert!(matches!(Datatype::contiguous(-1, &d), Err(TypeError::Negative { what: "count", .. })));
    assert!(matches!(Datatype::vector(2, -3, 4, &d), Err(TypeError::Negative { what: "blocklength", .. })));
    assert!(matches!(Datatype::contiguous(i64::MAX, &d), Err(TypeError::Overflow { .. })));
    assert!(matches!(Datatype::vector(4, 1, i64::MAX / 2, &d), Err(TypeError::Overflow { .. })));
    assert!(matches!(Datatype::resized(&d, 0, -8), Err(TypeError::BadExtent(-8))));
    assert!(matches!(Datatype::hindexed(&[1, 2], &[0], &d), Err(TypeError::LengthMismatch(_))));
    assert!(matches!(Datatype::structure(&[1], &[0, 8], std::slice::from_ref(&d)), Err(TypeError::LengthMismatch(_))));
}

#[test]
fn mpi_standard_examples() {
    // MPI 4.0 §5.1.2: vector(2, 3, 4) of a {(double,0),(char,8)} type with extent 16.
    let oldtype = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::byte()]).unwrap();
    let oldtype = Datatype::resized(&oldtype, 0, 16).unwrap();
    let v = Datatype::vector(2, 3, 4, &oldtype).unwrap();
    assert_eq!(v.extent(), 4 * 16 + 3 * 16);
    assert_eq!(v.size(), 6 * 9);
    let regions: Vec<_> = v.regions(0).collect();
    assert_eq!(regions[..4], [(0, 9), (16, 9), (32, 9), (64, 9)]);
    // A negative stride walks backwards.
    let back = Datatype::vector(3, 1, -2, &Datatype::int()).unwrap();
    assert_eq!(back.regions(0).collect::<Vec<_>>(), [(0, 4), (-8, 4), (-16, 4)]);
    assert_eq!((back.lb(), back.extent()), (-16, 20));
}
