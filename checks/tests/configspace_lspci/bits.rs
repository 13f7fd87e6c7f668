//! The register bits lspci prints by name, and the capability titles it prints, with their ids.

/// Flag names lspci prints and the register bit each one shows.
pub(crate) type BitTable = &'static [(&'static str, u32)];

pub(crate) const UNCOR_BITS: &[(&str, u32)] = &[
    ("DLP", 0x10),
    ("SDES", 0x20),
    ("TLP", 0x1000),
    ("FCP", 0x2000),
    ("CmpltTO", 0x4000),
    ("CmpltAbrt", 0x8000),
    ("UnxCmplt", 0x1_0000),
    ("RxOF", 0x2_0000),
    ("MalfTLP", 0x4_0000),
    ("ECRC", 0x8_0000),
    ("UnsupReq", 0x10_0000),
    ("ACSViol", 0x20_0000),
    ("UncorrIntErr", 0x40_0000),
    ("BlockedTLP", 0x80_0000),
    ("AtomicOpBlocked", 0x100_0000),
    ("TLPBlockedErr", 0x200_0000),
    ("PoisonTLPBlocked", 0x400_0000),
    ("DMWrReqBlocked", 0x800_0000),
    ("IDECheck", 0x1000_0000),
    ("MisIDETLP", 0x2000_0000),
    ("PCRC_CHECK", 0x4000_0000),
    ("TLPXlatBlocked", 0x8000_0000),
];

pub(crate) const COR_BITS: &[(&str, u32)] = &[
    ("RxErr", 0x1),
    ("BadTLP", 0x40),
    ("BadDLLP", 0x80),
    ("Rollover", 0x100),
    ("Timeout", 0x1000),
    ("AdvNonFatalErr", 0x2000),
    ("NonFatalErr", 0x2000), // older pciutils name
    ("CorrIntErr", 0x4000),
    ("HeaderOF", 0x8000),
];

pub(crate) const AERCAP_BITS: &[(&str, u32)] = &[
    ("ECRCGenCap", 0x20),
    ("GenCap", 0x20),
    ("ECRCGenEn", 0x40),
    ("CGenEn", 0x40),
    ("ECRCChkCap", 0x80),
    ("ChkCap", 0x80),
    ("ECRCChkEn", 0x100),
    ("ChkEn", 0x100),
    ("MultHdrRecCap", 0x200),
    ("MultHdrRecEn", 0x400),
    ("TLPPfxPres", 0x800),
    ("HdrLogCap", 0x1000),
];

pub(crate) const ACS_BITS: &[(&str, u16)] = &[
    ("SrcValid", 0x01),
    ("TransBlk", 0x02),
    ("ReqRedir", 0x04),
    ("CmpltRedir", 0x08),
    ("UpstreamFwd", 0x10),
    ("EgressCtrl", 0x20),
    ("DirectTrans", 0x40),
];

pub(crate) const DEVCAP_BITS: &[(&str, u32)] = &[
    ("ExtTag", 0x20),
    ("AttnBtn", 0x1000),
    ("AttnInd", 0x2000),
    ("PwrInd", 0x4000),
    ("RBE", 0x8000),
    ("FLReset", 0x1000_0000),
];

pub(crate) const DEVCTL_BITS: &[(&str, u16)] = &[
    ("RlxdOrd", 0x10),
    ("ExtTag", 0x100),
    ("PhantFunc", 0x200),
    ("AuxPwr", 0x400),
    ("NoSnoop", 0x800),
];

pub(crate) const DEVSTA_BITS: &[(&str, u16)] = &[
    ("CorrErr", 0x1),
    ("NonFatalErr", 0x2),
    ("UncorrErr", 0x2),
    ("FatalErr", 0x4),
    ("UnsupReq", 0x8),
    ("UnsuppReq", 0x8),
    ("AuxPwr", 0x10),
    ("TransPend", 0x20),
];

pub(crate) const LNKCAP_BITS: &[(&str, u32)] = &[
    ("ClockPM", 0x4_0000),
    ("Surprise", 0x8_0000),
    ("LLActRep", 0x10_0000),
    ("BwNot", 0x20_0000),
    ("ASPMOptComp", 0x40_0000),
];

pub(crate) const LNKSTA_BITS: &[(&str, u16)] = &[
    ("TrErr", 0x400),
    ("Train", 0x800),
    ("SlotClk", 0x1000),
    ("DLActive", 0x2000),
    ("BWMgmt", 0x4000),
    ("ABWMgmt", 0x8000),
];

/// lspci capability titles -> ids (standard, extended), for the ones we know.
pub(crate) fn std_title_id(title: &str) -> Option<u16> {
    let known: &[(&str, u16)] = &[
        ("Power Management", 0x01),
        ("MSI-X", 0x11),
        ("MSI:", 0x05),
        ("Express", 0x10),
        ("Subsystem", 0x0d),
        ("Vendor Specific", 0x09),
        ("PCI-X", 0x07),
    ];
    known
        .iter()
        .find(|(t, _)| title.starts_with(t))
        .map(|(_, id)| *id)
}

pub(crate) fn ext_title_id(title: &str) -> Option<u16> {
    let known: &[(&str, u16)] = &[
        ("Advanced Error Reporting", 0x01),
        ("Virtual Channel", 0x02),
        ("Device Serial Number", 0x03),
        ("Root Complex Event Collector Endpoint Association", 0x07),
        ("Vendor Specific Information", 0x0b),
        ("Access Control Services", 0x0d),
        ("Alternative Routing-ID Interpretation", 0x0e),
        ("Address Translation Service", 0x0f),
        ("Latency Tolerance Reporting", 0x18),
        ("Secondary PCI Express", 0x19),
        ("#19", 0x19),
        ("Downstream Port Containment", 0x1d),
        ("L1 PM Substates", 0x1e),
    ];
    known
        .iter()
        .find(|(t, _)| title.starts_with(t))
        .map(|(_, id)| *id)
}
