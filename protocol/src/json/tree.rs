//! The parsed body: every value of the document as one flat list of nodes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// One value of a parsed JSON document. The nodes are in document order: an
/// array's items, and an object's members (each a `String` node for its name,
/// then its value), follow their container's node and take its `span` nodes.
/// So the whole document is one allocation, however many containers it has,
/// and object members keep their order and duplicates, for the canonicalizer
/// to sort and refuse. Strings without escapes borrow from the body.
pub(super) enum Node<'a> {
    Null,
    Bool(bool),
    /// The value as serde_json reads it, and its token in the body (given
    /// after parsing, by `numbers::read_tokens`).
    Number(f64, &'a [u8]),
    String(Cow<'a, str>),
    Array {
        span: usize,
    },
    Object {
        span: usize,
    },
}

/// Parses `body` as serde_json parses any document (its recursion limit, its
/// checks of strings, numbers and trailing characters) into nodes.
pub(super) fn parse(body: &[u8]) -> Result<Vec<Node<'_>>, serde_json::Error> {
    let mut nodes = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    Append(&mut nodes).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(nodes)
}

/// The nodes after the value that starts `nodes`.
pub(super) fn after_value<'n, 'a>(nodes: &'n [Node<'a>]) -> &'n [Node<'a>] {
    match nodes.split_first() {
        Some((Node::Array { span } | Node::Object { span }, rest)) => {
            rest.get(*span..).unwrap_or_default()
        }
        Some((_, rest)) => rest,
        None => nodes,
    }
}

/// With serde_json's `arbitrary_precision` feature (never enabled by this
/// crate, but features unify across a build), numbers reach a visitor as a map
/// with this single key. Refusing it makes such a build digest JSON raw instead
/// of silently hashing a different canonical form.
const ARBITRARY_PRECISION_TOKEN: &str = "$serde_json::private::Number";

/// An object member's name, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object member name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

/// Appends the next value of the document, and everything in it, to the nodes.
struct Append<'n, 'a>(&'n mut Vec<Node<'a>>);

impl Append<'_, '_> {
    /// Sets the span of the container whose node is at `at` to the nodes pushed since.
    fn close(self, at: usize) {
        let span = self.0.len() - at - 1;
        if let Some(Node::Array { span: open } | Node::Object { span: open }) = self.0.get_mut(at) {
            *open = span;
        }
    }
}

impl<'de> DeserializeSeed<'de> for Append<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Append<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push(Node::Null);
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push(Node::Bool(v));
        Ok(())
    }

    // JCS treats every number as an IEEE 754 double (the canonicalizer converts
    // integers the same way); the exactness check catches what this rounds.
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push(Node::Number(v as f64, &[]));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push(Node::Number(v as f64, &[]));
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.push(Node::Number(v, &[]));
        Ok(())
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        self.0.push(Node::String(Cow::Borrowed(v)));
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push(Node::String(Cow::Owned(v.to_owned())));
        Ok(())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<(), E> {
        self.0.push(Node::String(Cow::Owned(v)));
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let at = self.0.len();
        self.0.push(Node::Array { span: 0 });
        while seq.next_element_seed(Append(&mut *self.0))?.is_some() {}
        self.close(at);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let at = self.0.len();
        self.0.push(Node::Object { span: 0 });
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if key == ARBITRARY_PRECISION_TOKEN {
                return Err(de::Error::custom(
                    "serde_json arbitrary_precision is not supported",
                ));
            }
            self.0.push(Node::String(key));
            map.next_value_seed(Append(&mut *self.0))?;
        }
        self.close(at);
        Ok(())
    }
}

/// The value that starts a list of nodes, for the test oracle to serialize
/// through `serde_json_canonicalizer`.
#[cfg(all(test, not(target_arch = "wasm32")))]
pub(super) struct Value<'n, 'a>(pub &'n [Node<'a>]);

#[cfg(all(test, not(target_arch = "wasm32")))]
impl serde::Serialize for Value<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap as _, SerializeSeq as _};
        let Some((node, rest)) = self.0.split_first() else {
            return serializer.serialize_unit();
        };
        match node {
            Node::Null => serializer.serialize_unit(),
            Node::Bool(b) => serializer.serialize_bool(*b),
            Node::Number(n, _) => serializer.serialize_f64(*n),
            Node::String(s) => serializer.serialize_str(s),
            Node::Array { span } => {
                let mut items = rest.get(..*span).unwrap_or_default();
                let mut seq = serializer.serialize_seq(None)?;
                while !items.is_empty() {
                    seq.serialize_element(&Value(items))?;
                    items = after_value(items);
                }
                seq.end()
            }
            Node::Object { span } => {
                let mut members = rest.get(..*span).unwrap_or_default();
                let mut map = serializer.serialize_map(None)?;
                while let Some((Node::String(name), value)) = members.split_first() {
                    map.serialize_entry(&**name, &Value(value))?;
                    members = after_value(value);
                }
                map.end()
            }
        }
    }
}
