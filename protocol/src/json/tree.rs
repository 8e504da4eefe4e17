//! The parsed body: a JSON tree that keeps every object member as sent.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A parsed JSON document that keeps object members as sent, duplicates
/// included, so the canonicalizer can refuse them. Strings without escapes
/// borrow from the body: a large document is parsed without a copy of each.
pub(super) enum Tree<'a> {
    Null,
    Bool(bool),
    Number(f64),
    String(Cow<'a, str>),
    Array(Vec<Tree<'a>>),
    Object(Vec<(Cow<'a, str>, Tree<'a>)>),
}

/// With serde_json's `arbitrary_precision` feature (never enabled by this
/// crate, but features unify across a build), numbers reach a visitor as a map
/// with this single key. Refusing it makes such a build digest JSON raw instead
/// of silently hashing a different canonical form.
const ARBITRARY_PRECISION_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Deserialize<'de> for Tree<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }
}

/// An object member's name, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
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

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Tree<'de>, E> {
        Ok(Tree::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Tree<'de>, E> {
        Ok(Tree::Bool(v))
    }

    // JCS treats every number as an IEEE 754 double (the canonicalizer converts
    // integers the same way); the exactness check catches what this rounds.
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tree<'de>, E> {
        Ok(Tree::Number(v as f64))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tree<'de>, E> {
        Ok(Tree::Number(v as f64))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tree<'de>, E> {
        Ok(Tree::Number(v))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Tree<'de>, E> {
        Ok(Tree::String(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tree<'de>, E> {
        Ok(Tree::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Tree<'de>, E> {
        Ok(Tree::String(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Tree::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree<'de>, A::Error> {
        let mut members = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if key == ARBITRARY_PRECISION_TOKEN {
                return Err(de::Error::custom(
                    "serde_json arbitrary_precision is not supported",
                ));
            }
            members.push((key, map.next_value()?));
        }
        Ok(Tree::Object(members))
    }
}

/// The test oracle serializes the same tree through `serde_json_canonicalizer`.
#[cfg(test)]
impl serde::Serialize for Tree<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Tree::Null => serializer.serialize_unit(),
            Tree::Bool(b) => serializer.serialize_bool(*b),
            Tree::Number(n) => serializer.serialize_f64(*n),
            Tree::String(s) => serializer.serialize_str(s),
            Tree::Array(items) => {
                use serde::ser::SerializeSeq as _;
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Tree::Object(members) => {
                use serde::ser::SerializeMap as _;
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (key, value) in members {
                    map.serialize_entry(&**key, value)?;
                }
                map.end()
            }
        }
    }
}
