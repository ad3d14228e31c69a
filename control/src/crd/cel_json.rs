//! JSON bound to CEL as it is, without converting the whole document first.
//!
//! An admission policy that reads `object.spec.replicas` should not pay for converting
//! the object's metadata, managed fields and status into CEL values. [`val`] wraps a
//! borrowed `serde_json::Value`: scalars become the CEL crate's own values (strings
//! borrowed, not copied), and an object or array becomes a lazy container that builds one
//! level of itself, the CEL crate's own `map` or `list` of lazy children, the first time
//! anything looks into it. Every operation on a container (`.f`, `[i]`, `in`, `size`, the
//! comprehensions, `==`, `+`, the conversion of a result) is the built-in container's, so
//! expressions see exactly what [`super::cel::to_cel`] gives them: integers `int` (`uint`
//! past `i64`), other numbers `double`, objects `map(string, dyn)`.

use std::collections::HashMap;
use std::sync::OnceLock;

use cel::common::traits::{Adder, Container, Indexer, Iterable, Sizer, Zeroer};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt, Type,
    LIST_TYPE, MAP_TYPE,
};
use cel::common::value::{Builtin, BuiltinRef, Val};
use serde_json::{Map, Value};

/// `v` as a CEL value that borrows it.
pub(crate) fn val<'v>(v: &'v Value) -> Box<dyn Val + 'v> {
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(f)) if n.is_f64() => Box::new(CelDouble::from(f)),
            _ => Box::new(CelUInt::from(n.as_u64().unwrap_or(0))),
        },
        Value::String(s) => Box::new(CelString::from(s.as_str())),
        Value::Array(items) => Box::new(JsonList {
            json: items,
            level: OnceLock::new(),
        }),
        Value::Object(fields) => Box::new(JsonMap {
            json: fields,
            level: OnceLock::new(),
        }),
    }
}

fn map_level<'v>(json: &'v Map<String, Value>) -> CelMap<'v> {
    let entries: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = json
        .iter()
        .map(|(k, v)| (CelMapKey::from(k.as_str()), val(v)))
        .collect();
    CelMap::from(entries)
}

fn list_level(json: &[Value]) -> CelList<'_> {
    CelList::from(json.iter().map(val).collect::<Vec<_>>())
}

/// The `Val` methods of a lazy container: each answers with its built level's.
macro_rules! lazy_container {
    (
        $(#[$doc:meta])* $ty:ident($json:ty) built by $build:ident into $level:ident,
        $builtin:ident, $cel_type:expr, { $($extra:tt)* }
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        struct $ty<'v> {
            json: &'v $json,
            level: OnceLock<$level<'v>>,
        }

        impl<'v> $ty<'v> {
            fn level(&self) -> &$level<'v> {
                self.level.get_or_init(|| $build(self.json))
            }

            fn into_level(self) -> $level<'v> {
                self.level.into_inner().unwrap_or_else(|| $build(self.json))
            }
        }

        impl<'v> Val for $ty<'v> {
            fn get_type(&self) -> &Type {
                &$cel_type
            }

            fn cel_type() -> &'static Type {
                &$cel_type
            }

            fn as_container(&self) -> Option<&dyn Container> {
                Some(self.level())
            }

            fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
            where
                Self: 'w,
            {
                Some(self.level())
            }

            fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
            where
                Self: 'w,
            {
                Some(Box::new(self.into_level()))
            }

            fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
            where
                Self: 'w,
            {
                Some(self.level())
            }

            fn as_sizer(&self) -> Option<&dyn Sizer> {
                Some(self)
            }

            fn as_zeroer(&self) -> Option<&dyn Zeroer> {
                Some(self)
            }

            fn equals(&self, other: &dyn Val) -> bool {
                self.level().equals(other)
            }

            fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
            where
                Self: 'w,
            {
                Box::new($ty {
                    json: self.json,
                    level: OnceLock::new(),
                })
            }

            fn as_builtin<'b, 'w>(&'b self) -> BuiltinRef<'b, 'w>
            where
                Self: 'w,
            {
                BuiltinRef::$builtin(self.level())
            }

            fn into_builtin<'w>(self: Box<Self>) -> Option<Builtin<'w>>
            where
                Self: 'w,
            {
                Some(Builtin::$builtin(self.into_level()))
            }

            $($extra)*
        }

        // `size()` and zero-ness need no level: the JSON knows.
        impl Sizer for $ty<'_> {
            fn size(&self) -> CelInt {
                CelInt::from(self.json.len() as i64)
            }
        }

        impl Zeroer for $ty<'_> {
            fn is_zero_value(&self) -> bool {
                self.json.is_empty()
            }
        }
    };
}

lazy_container!(
    /// A JSON object; its entries are converted when first looked at.
    JsonMap(Map<String, Value>) built by map_level into CelMap,
    Map, MAP_TYPE, {}
);
lazy_container!(
    /// A JSON array; its items are converted when first looked at.
    JsonList([Value]) built by list_level into CelList,
    List, LIST_TYPE, {
        fn as_adder<'b, 'w>(&'b self) -> Option<&'b (dyn Adder + 'w)>
        where
            Self: 'w,
        {
            Some(self.level())
        }
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each expression gives the same answer on the lazy binding as on the converted one.
    #[test]
    fn lazy_json_answers_as_converted_json() {
        let doc = json!({
            "metadata": {"name": "a", "labels": {"app": "web", "tier": "1"}},
            "spec": {"replicas": 3, "ratio": 0.5, "big": 18446744073709551615u64,
                     "ports": [80, 443], "names": ["x", "y"], "none": null, "on": true,
                     "empty": {}, "nothing": []},
        });
        let exprs = [
            "object.metadata.name",
            "object.metadata.labels",
            "object.metadata.labels == {'app': 'web', 'tier': '1'}",
            "{'app': 'web', 'tier': '1'} == object.metadata.labels",
            "object.metadata.labels != {'app': 'web'}",
            "object.spec.ports == [80, 443]",
            "[80, 443] == object.spec.ports",
            "object.spec.ports + [8080]",
            "[1] + object.spec.ports",
            "object.spec.ports + object.spec.ports",
            "size(object.spec.ports) + size(object.metadata.labels)",
            "object.spec.names.size()",
            "443 in object.spec.ports",
            "'app' in object.metadata.labels",
            "'nope' in object.metadata.labels",
            "object.metadata.labels.all(k, object.metadata.labels[k].size() >= 1)",
            "object.spec.ports.map(p, p * 2)",
            "object.spec.names.exists(n, n.startsWith('y'))",
            "has(object.spec.replicas) && !has(object.spec.gone)",
            "object.spec.replicas + 1",
            "object.spec.ratio * 2.0",
            "object.spec.big",
            "type(object.spec.big) == uint",
            "object.spec.none == null",
            "object.spec.on",
            "object.spec.ports[1]",
            "object.spec.gone",
            "object.spec.ports[5]",
            "object.spec.empty == {} && object.spec.nothing == []",
            "object.?spec.?replicas.orValue(0)",
            "object.spec",
            "object",
            "[object.spec.ports, object.spec.names]",
            "{'m': object.metadata}.m.labels.app",
            "object.spec.ports.filter(p, p > 100)[0]",
            "object.metadata.labels.filter(k, k != 'app')",
            "optional.ofNonZeroValue(object.spec.empty).hasValue()",
            "object.spec.replicas.string()",
        ];
        let env = super::super::cel::env();
        let lazy = |e: &str| {
            let mut ctx = cel::Context::with_env(env.clone());
            ctx.add_variable_as_val("object", val(&doc));
            env.compile(e).unwrap().execute(&ctx)
        };
        assert_eq!(lazy(exprs[2]), Ok(cel::Value::Bool(true)));
        assert_eq!(lazy(exprs[21]), Ok(cel::Value::UInt(u64::MAX)));
        assert_eq!(lazy(exprs[25]), Ok(cel::Value::Int(443)));
        for e in exprs {
            let program = env.compile(e).expect(e);
            let mut converted = cel::Context::with_env(env.clone());
            converted.add_variable_from_value("object", super::super::cel::to_cel(&doc));
            let mut lazy = cel::Context::with_env(env.clone());
            lazy.add_variable_as_val("object", val(&doc));
            assert_eq!(program.execute(&lazy), program.execute(&converted), "{e}");
        }
    }
}
