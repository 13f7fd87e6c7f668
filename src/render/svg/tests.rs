use super::labels::{short_bdf, short_name};
use super::write::{n, path_d};

#[test]
fn names_people_know() {
    assert_eq!(
        short_name("NVIDIA GH100 [H200 SXM 141GB]"),
        "H200 SXM 141GB"
    );
    assert_eq!(
        short_name("Mellanox MT2910 Family [ConnectX-7]"),
        "ConnectX-7"
    );
    assert_eq!(short_name("8086:352a"), "8086:352a");
    assert_eq!(short_name("odd ] name ["), "odd ] name [");
    assert_eq!(short_bdf("0000:18:00.0"), "18:00.0");
    assert_eq!(short_bdf("0001:18:00.0"), "0001:18:00.0");
}

#[test]
fn escaping() {
    assert_eq!(n(1.25), "1.3");
    assert_eq!(n(2.0), "2");
    assert_eq!(path_d(&[(0.0, 1.0), (2.5, 3.0)]), "M0 1 L2.5 3");
}
