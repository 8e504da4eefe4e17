//! JSON has one number type, and to JSON Schema (hence to the OpenAPI
//! document) `7.0` and `7e0` are integers just like `7`. Integer fields of
//! requests therefore accept any number without a fractional part that fits
//! the field; `7.5`, negative numbers and strings are still refused.

use serde::de::{self, Deserializer, Visitor};

struct Integral;

impl Visitor<'_> for Integral {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a non-negative integer")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        // 2^64 is exact as an f64; every integral f64 below it converts exactly.
        if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
            Ok(v as u64)
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
}

pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Integral)
}

pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = d.deserialize_any(Integral)?;
    i64::try_from(v).map_err(|_| {
        de::Error::invalid_value(de::Unexpected::Unsigned(v), &"an integer up to 2^63 - 1")
    })
}

pub fn u16<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let v = d.deserialize_any(Integral)?;
    u16::try_from(v).map_err(|_| {
        de::Error::invalid_value(de::Unexpected::Unsigned(v), &"an integer up to 65535")
    })
}

pub fn option_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Optional;
    impl<'de> Visitor<'de> for Optional {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a non-negative integer or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            u64(d).map(Some)
        }
    }
    d.deserialize_option(Optional)
}
