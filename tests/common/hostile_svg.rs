//! Topology pictures planted in `fleet --svg-dir` by an adversary: each passes the picture
//! check (its root says `gdrdoctor topo` wrote it, and it holds none of `<script`,
//! `<foreignObject`, `javascript:`, `<iframe`) and each would run a script in the fleet page if
//! it were inlined as markup. Every one of them marks the page when it runs (the page's title
//! becomes `pwned ...` or `<body data-pwned>` is set), so a test can prove that none ran.

/// `(what it tries, the file's text)`.
pub fn hostile_svgs() -> Vec<(&'static str, String)> {
    let root = "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" width=\"200\" height=\"60\" data-generator=\"gdrdoctor topo\"";
    vec![
        (
            "an onload handler on the root",
            format!(
                "{root} onload=\"document.title='pwned onload'\"><rect width=\"200\" height=\"60\" fill=\"#2a2\"/></svg>"
            ),
        ),
        (
            "an onerror handler on an image inside",
            format!(
                "{root}><image href=\"nowhere.png\" width=\"10\" height=\"10\" onerror=\"document.body.setAttribute('data-pwned','image onerror')\"/><text x=\"5\" y=\"30\">t</text></svg>"
            ),
        ),
        (
            "a javascript: link written with an entity",
            format!(
                "{root}><a href=\"java&#115;cript:document.title='pwned link'\"><rect id=\"lnk\" width=\"200\" height=\"60\" fill=\"#a22\"/></a><set attributeName=\"href\" to=\"java&#115;cript:document.title='pwned set'\"/></svg>"
            ),
        ),
        (
            "a break-out: the picture closed early, then an image with an onerror handler",
            format!(
                "{root}><title>t</title></svg><img src=\"nowhere\" onerror=\"document.body.setAttribute('data-pwned','break-out');document.title='pwned break-out'\"><svg>"
            ),
        ),
    ]
}
