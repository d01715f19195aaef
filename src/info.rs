//! Reading Redis's `INFO` answers: `name:value` lines, grouped in sections.
//! A leaf: the restart guard (`net::guard`) and the local launchers read
//! fields with it.

/// The value of the field `name` in the text of an `INFO` answer (its
/// `name:value` lines), trimmed; `None` if no line holds it.
pub(crate) fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}
