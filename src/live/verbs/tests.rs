use super::error::rc_errno;
use super::*;

#[test]
fn verbs_error_message_has_strerror_and_cause() {
    let e = VerbsError::new("ibv_get_device_list", 38);
    assert_eq!(e.errno, 38);
    assert!(
        e.message.contains("Function not implemented"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("no kernel RDMA support"),
        "{}",
        e.message
    );
    assert!(e.to_string().starts_with("ibv_get_device_list: "));
    let e = VerbsError::new("ibv_reg_mr", 0);
    assert!(e.message.contains("without setting errno"));
}

#[test]
fn rc_errno_accepts_both_conventions() {
    assert_eq!(rc_errno(22), 22);
    assert_eq!(rc_errno(-22), 22);
}

#[test]
fn port_attr_names() {
    let a = IbvPortAttr {
        state: PORT_ACTIVE,
        phys_state: 5,
        link_layer: LINK_LAYER_ETHERNET,
        active_mtu: 5,
        ..Default::default()
    };
    assert_eq!(a.state_name(), "ACTIVE");
    assert_eq!(a.phys_state_name(), "LinkUp");
    assert_eq!(a.link_layer_name(), "Ethernet");
    assert_eq!(a.active_mtu_bytes(), Some(4096));
    assert_eq!(a.max_mtu_bytes(), None);
}
