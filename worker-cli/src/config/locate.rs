//! Finds the line of a key in the TOML text (toml_edit keeps the spans).

use toml_edit::{ImDocument, Item, TableLike, Value};

/// The 1-based line of the deepest part of `path` found in `text`: the key itself, or the table
/// that should hold a missing key. `None` if nothing of the path is in the file.
pub(crate) fn line(text: &str, path: &[String]) -> Option<usize> {
    let doc = ImDocument::parse(text).ok()?;
    let mut node = Node::Table(doc.as_table());
    let mut span = None;
    for segment in path {
        let next =
            match node {
                Node::Table(table) => table.get_key_value(segment).map(|(key, item)| {
                    span = key.span().or_else(|| item.span()).or(span.clone());
                    Node::of_item(item)
                }),
                Node::Tables(tables) => segment
                    .parse()
                    .ok()
                    .and_then(|i: usize| tables.get(i))
                    .map(|table| {
                        span = table.span().or(span.clone());
                        Node::Table(table as &dyn TableLike)
                    }),
                Node::Array(array) => {
                    segment
                        .parse()
                        .ok()
                        .and_then(|i: usize| array.get(i))
                        .map(|value| {
                            span = value.span().or(span.clone());
                            Node::of_value(value)
                        })
                }
                Node::Leaf => None,
            };
        match next {
            Some(next) => node = next,
            None => break,
        }
    }
    let start = span?.start;
    let upto = text.get(..start)?;
    Some(upto.matches('\n').count() + 1)
}

enum Node<'a> {
    Table(&'a dyn TableLike),
    Tables(&'a toml_edit::ArrayOfTables),
    Array(&'a toml_edit::Array),
    Leaf,
}

impl<'a> Node<'a> {
    fn of_item(item: &'a Item) -> Self {
        match item {
            Item::Table(table) => Node::Table(table),
            Item::ArrayOfTables(tables) => Node::Tables(tables),
            Item::Value(value) => Node::of_value(value),
            Item::None => Node::Leaf,
        }
    }

    fn of_value(value: &'a Value) -> Self {
        match value {
            Value::InlineTable(table) => Node::Table(table),
            Value::Array(array) => Node::Array(array),
            _ => Node::Leaf,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn finds_keys_tables_and_array_entries() {
        let text = "[kafka]\nbootstrap = \"x\"\n\n[[route]]\ntopic = \"a\"\n[[route]]\ntopic = \"b\"\nurl = \"u\"\n";
        assert_eq!(line(text, &path(&["kafka", "bootstrap"])), Some(2));
        assert_eq!(line(text, &path(&["route", "1", "url"])), Some(8));
        assert_eq!(line(text, &path(&["route", "0", "topic"])), Some(5));
        // A missing key points at its table.
        assert!(matches!(
            line(text, &path(&["route", "1", "command"])),
            Some(6..=7)
        ));
        assert_eq!(line(text, &path(&["nothing"])), None);
    }
}
