//! The SQL layer the PostgreSQL backend's queries are written against: connections,
//! cached statements, rows and parameters shaped like the SQLite backend's (rusqlite's
//! `prepare_cached` / `query_row` / `query_map` / `params!`), over the synchronous
//! `postgres` client. So each rule reads the same on both backends; what differs is in the
//! SQL text and in how a transaction is opened (see `super::PostgresStore::write`).
//!
//! - SQL is written with SQLite's `?N` placeholders and translated once per connection
//!   and statement (`translate`): `?N` → `$N`, `INSERT OR IGNORE` → `ON CONFLICT DO
//!   NOTHING`.
//! - Values are loosely typed like SQLite's: an integer binds to any integer, boolean or
//!   text parameter; integer and boolean columns read as any Rust integer or `bool`. The
//!   schema keeps SQLite's types (BIGINT for integers and flags, TEXT for JSON, BYTEA for
//!   blobs), so every query means the same on both.
//! - Rows are fetched whole; nothing holds a cursor while the caller runs another query.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::error::Error as StdError;

use ::postgres::error::SqlState;
use ::postgres::types::{FromSql as PgFromSql, IsNull, ToSql as PgToSql, Type};
use bytes::BytesMut;

/// A value as this layer moves it, like SQLite's storage classes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Bool(bool),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

#[derive(Debug)]
pub enum Error {
    Pg(::postgres::Error),
    /// A statement PostgreSQL refused to prepare, with its SQL.
    Prepare(::postgres::Error, String),
    /// `query_row` found no row.
    QueryReturnedNoRows,
    /// A column or parameter that does not convert.
    Conversion(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Pg(e) => write!(f, "{}", pg_display(e)),
            Error::Prepare(e, sql) => write!(f, "{} in statement: {sql}", pg_display(e)),
            Error::QueryReturnedNoRows => write!(f, "query returned no rows"),
            Error::Conversion(why) => write!(f, "{why}"),
        }
    }
}

fn pg_display(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

impl StdError for Error {}

impl From<::postgres::Error> for Error {
    fn from(e: ::postgres::Error) -> Self {
        if is_retryable_code(e.code()) {
            RETRYABLE.with(|r| r.set(true));
        }
        Error::Pg(e)
    }
}

thread_local! {
    /// Set when this thread saw a serialization failure or deadlock: the transaction it
    /// ran in must be retried whole, whatever the caller turned the error into.
    static RETRYABLE: Cell<bool> = const { Cell::new(false) };
}

/// Whether a retryable error was seen since the last call (and clears the flag).
pub fn take_retryable() -> bool {
    RETRYABLE.with(|r| r.replace(false))
}

/// A parameter whose type PostgreSQL could not tell, or told wrong.
fn is_type_error(code: Option<&SqlState>) -> bool {
    matches!(
        code,
        Some(c) if *c == SqlState::INDETERMINATE_DATATYPE
            || *c == SqlState::AMBIGUOUS_PARAMETER
            || *c == SqlState::UNDEFINED_FUNCTION
            || *c == SqlState::DATATYPE_MISMATCH
    )
}

pub fn is_retryable_code(code: Option<&SqlState>) -> bool {
    matches!(
        code,
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

impl Error {
    pub fn code(&self) -> Option<&SqlState> {
        match self {
            Error::Pg(e) | Error::Prepare(e, _) => e.code(),
            _ => None,
        }
    }

    /// In plain words, when the error means the database is not there or cannot write
    /// right now (see [`unavailable`]).
    pub fn unavailable(&self) -> Option<String> {
        match self {
            Error::Pg(e) | Error::Prepare(e, _) => unavailable(e),
            _ => None,
        }
    }
}

/// In plain words, when `e` means the database is not there or cannot write right now:
/// the connection closed or broken (I/O, a timeout), or the server saying so — SQLSTATE
/// class 08 (connection exception), 57P01/57P02/57P03 (shutting down, crashed, starting
/// up), class 53 (insufficient resources: disk full, out of memory, too many
/// connections), 25006 (a read-only transaction: a standby, or
/// `default_transaction_read_only`). The same call can succeed once the database is back.
pub fn unavailable(e: &::postgres::Error) -> Option<String> {
    if let Some(db) = e.as_db_error() {
        return unavailable_code(db.code().code(), db.message());
    }
    if e.is_closed() {
        return Some("the database is unavailable: the connection was closed".into());
    }
    let mut source = e.source();
    let mut io = None;
    while let Some(cause) = source {
        if let Some(found) = cause.downcast_ref::<std::io::Error>() {
            io = Some(found);
            break;
        }
        source = cause.source();
    }
    if let Some(io) = io {
        return Some(format!("the database is unavailable: {io}"));
    }
    let text = e.to_string();
    text.starts_with("timeout")
        .then(|| format!("the database is unavailable: {text}"))
}

/// [`unavailable`] for an error the server sent: its SQLSTATE and message.
pub fn unavailable_code(code: &str, message: &str) -> Option<String> {
    let what = match code {
        "57P01" | "57P02" => "the database is shutting down",
        "57P03" => "the database is not accepting connections yet",
        "25006" => "the database is read-only",
        c if c.starts_with("08") => "the database is unavailable",
        c if c.starts_with("53") => "the database is out of resources",
        _ => return None,
    };
    Some(format!("{what} ({code}: {message})"))
}

/// `query_row(..).optional()`: no row is `None`.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

// ---- Parameters ----

pub trait ToSql {
    fn to_value(&self) -> Value;
}

macro_rules! to_sql_int {
    ($($t:ty),*) => {$(
        impl ToSql for $t {
            fn to_value(&self) -> Value {
                Value::Int(*self as i64)
            }
        }
    )*};
}
to_sql_int!(i64, i32, i16, u32, u16, u8);

impl ToSql for u64 {
    fn to_value(&self) -> Value {
        // Beyond i64 cannot be stored (as on SQLite): saturate rather than wrap.
        Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToSql for usize {
    fn to_value(&self) -> Value {
        Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToSql for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
}

impl ToSql for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl ToSql for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}

impl ToSql for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToSql for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl ToSql for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}

impl ToSql for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_value(&self) -> Value {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToSql + ?Sized> ToSql for Box<T> {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

/// What a statement can be given as its parameters.
pub trait Params {
    fn values(&self) -> Vec<Value>;
}

impl Params for &[&dyn ToSql] {
    fn values(&self) -> Vec<Value> {
        self.iter().map(|v| v.to_value()).collect()
    }
}

impl Params for [&dyn ToSql; 0] {
    fn values(&self) -> Vec<Value> {
        Vec::new()
    }
}

impl Params for Vec<Value> {
    fn values(&self) -> Vec<Value> {
        self.clone()
    }
}

macro_rules! params_arrays {
    ($($n:literal),*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn values(&self) -> Vec<Value> {
                self.iter().map(|v| v.to_value()).collect()
            }
        }
        impl<T: ToSql> Params for &[T; $n] {
            fn values(&self) -> Vec<Value> {
                self.iter().map(|v| v.to_value()).collect()
            }
        }
    )*};
}
params_arrays!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);

/// `params![a, b, …]`: heterogeneous parameters, in placeholder order.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::postgres::compat::ToSql]
    };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::postgres::compat::ToSql),+] as &[&dyn $crate::postgres::compat::ToSql]
    };
}
pub(crate) use params;

/// A value bound to a parameter of the type PostgreSQL inferred for it.
#[derive(Debug)]
struct Bind(Value);

type BoxError = Box<dyn StdError + Sync + Send>;

impl PgToSql for Bind {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        let text_like = |t: &Type| {
            *t == Type::TEXT
                || *t == Type::VARCHAR
                || *t == Type::BPCHAR
                || *t == Type::NAME
                || *t == Type::UNKNOWN
        };
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => int_to_sql(*i, ty, out, text_like(ty)),
            Value::Bool(b) if *ty == Type::BOOL => b.to_sql(ty, out),
            Value::Bool(b) => int_to_sql(i64::from(*b), ty, out, text_like(ty)),
            Value::Real(f) if *ty == Type::FLOAT8 => f.to_sql(ty, out),
            Value::Real(f) if *ty == Type::FLOAT4 => (*f as f32).to_sql(ty, out),
            // PostgreSQL text cannot hold NUL (SQLite's can): a NUL in a log line or a
            // command's output is stored as U+FFFD rather than failing the write.
            Value::Text(s) if text_like(ty) && s.contains('\0') => s
                .replace('\0', "\u{FFFD}")
                .as_str()
                .to_sql(&Type::TEXT, out),
            Value::Text(s) if text_like(ty) => s.as_str().to_sql(&Type::TEXT, out),
            Value::Text(s) if *ty == Type::JSON || *ty == Type::JSONB => {
                if *ty == Type::JSONB {
                    out.extend_from_slice(&[1]);
                }
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            Value::Blob(b) if *ty == Type::BYTEA => b.as_slice().to_sql(ty, out),
            v => Err(format!("cannot bind {} to a parameter of type {ty}", kind(v)).into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    ::postgres::types::to_sql_checked!();
}

fn int_to_sql(
    i: i64,
    ty: &Type,
    out: &mut BytesMut,
    text_like: bool,
) -> std::result::Result<IsNull, BoxError> {
    match *ty {
        Type::INT8 => i.to_sql(ty, out),
        Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
        Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
        Type::BOOL => (i != 0).to_sql(ty, out),
        Type::FLOAT8 => (i as f64).to_sql(ty, out),
        _ if text_like => i.to_string().as_str().to_sql(&Type::TEXT, out),
        _ => Err(format!("cannot bind an integer to a parameter of type {ty}").into()),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Bool(_) => "a boolean",
        Value::Real(_) => "a real",
        Value::Text(_) => "a text",
        Value::Blob(_) => "a blob",
    }
}

// ---- Rows ----

/// A column read as whatever PostgreSQL sent.
struct Raw(Value);

impl<'a> PgFromSql<'a> for Raw {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, BoxError> {
        let v = match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::OID => Value::Int(u32::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Bool(bool::from_sql(ty, raw)?),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(raw.to_vec()),
            Type::JSONB => Value::Text(String::from_utf8(raw.get(1..).unwrap_or(&[]).to_vec())?),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::UNKNOWN => {
                Value::Text(String::from_utf8(raw.to_vec())?)
            }
            _ => return Err(format!("unsupported column type {ty} (cast it in the query)").into()),
        };
        Ok(Raw(v))
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Self, BoxError> {
        Ok(Raw(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

pub trait FromSql: Sized {
    fn from_value(v: Value) -> Result<Self>;
}

fn wrong(v: &Value, want: &str) -> Error {
    Error::Conversion(format!("cannot read {} as {want}", kind(v)))
}

macro_rules! from_sql_int {
    ($($t:ty),*) => {$(
        impl FromSql for $t {
            fn from_value(v: Value) -> Result<Self> {
                match v {
                    Value::Int(i) => <$t>::try_from(i)
                        .map_err(|e| Error::Conversion(format!("{i} as {}: {e}", stringify!($t)))),
                    Value::Bool(b) => Ok(<$t>::from(b)),
                    other => Err(wrong(&other, stringify!($t))),
                }
            }
        }
    )*};
}
from_sql_int!(i64, i32, i16, u64, u32, u16, u8, usize);

impl FromSql for bool {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Int(i) => Ok(i != 0),
            Value::Bool(b) => Ok(b),
            other => Err(wrong(&other, "bool")),
        }
    }
}

impl FromSql for f64 {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Real(f) => Ok(f),
            Value::Int(i) => Ok(i as f64),
            other => Err(wrong(&other, "f64")),
        }
    }
}

impl FromSql for String {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Text(s) => Ok(s),
            other => Err(wrong(&other, "text")),
        }
    }
}

impl FromSql for Vec<u8> {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Blob(b) => Ok(b),
            Value::Text(s) => Ok(s.into_bytes()),
            other => Err(wrong(&other, "blob")),
        }
    }
}

impl FromSql for Value {
    fn from_value(v: Value) -> Result<Self> {
        Ok(v)
    }
}

impl<T: FromSql> FromSql for Option<T> {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A column position (rusqlite also takes names; these queries never do).
pub trait RowIndex {
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

pub struct Row<'a> {
    row: &'a ::postgres::Row,
}

impl Row<'_> {
    pub fn get<I: RowIndex, T: FromSql>(&self, idx: I) -> Result<T> {
        let idx = idx.index();
        let raw: Raw = self.row.try_get(idx)?;
        T::from_value(raw.0).map_err(|e| match e {
            Error::Conversion(why) => Error::Conversion(format!(
                "column {} ({}): {why}",
                idx,
                self.row.columns().get(idx).map(|c| c.name()).unwrap_or("?")
            )),
            e => e,
        })
    }
}

macro_rules! row_tuples {
    ($( ($($t:ident $i:tt),+) )*) => {$(
        impl<'r, $($t: FromSql),+> TryFrom<&Row<'r>> for ($($t,)+) {
            type Error = Error;
            fn try_from(r: &Row<'r>) -> Result<Self> {
                Ok(($(r.get::<usize, $t>($i)?,)+))
            }
        }
    )*};
}
row_tuples! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
    (A 0, B 1, C 2, D 3, E 4)
    (A 0, B 1, C 2, D 3, E 4, F 5)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15)
}

// ---- Connections and statements ----

/// A pooled client and its prepared statements (keyed by the SQL as written).
pub struct PgConn {
    pub client: ::postgres::Client,
    pub cache: HashMap<String, ::postgres::Statement>,
    /// A read call's transaction is still open: its answer went back before the
    /// `ROLLBACK`, which runs before the connection is pooled again.
    pub read_open: bool,
}

/// One open transaction on a pooled connection: every query of a store call runs in it.
/// Rolled back when dropped unfinished.
pub struct Connection<'a> {
    client: RefCell<&'a mut ::postgres::Client>,
    cache: RefCell<&'a mut HashMap<String, ::postgres::Statement>>,
    /// Still to be committed or rolled back.
    open: Cell<bool>,
    /// A statement failed: PostgreSQL has aborted the transaction, and a COMMIT would
    /// quietly roll it back, so `commit` refuses instead.
    failed: Cell<bool>,
}

/// The SQLite backend's name for a write transaction; here every connection is one.
pub type Transaction<'a> = Connection<'a>;

fn no_tx() -> Error {
    Error::Conversion("the transaction is already finished".into())
}

impl<'a> Connection<'a> {
    /// The transaction the caller has just begun on `client` (`BEGIN …`).
    pub fn begun(
        client: &'a mut ::postgres::Client,
        cache: &'a mut HashMap<String, ::postgres::Statement>,
    ) -> Self {
        Connection {
            client: RefCell::new(client),
            cache: RefCell::new(cache),
            open: Cell::new(true),
            failed: Cell::new(false),
        }
    }

    /// Commits; refused (and rolled back) when one of its statements failed.
    pub fn commit(self) -> Result<()> {
        if self.failed.get() {
            return Err(Error::Conversion(
                "a statement of this transaction failed: rolled back".into(),
            ));
        }
        self.open.set(false);
        self.client.borrow_mut().batch_execute("COMMIT")?;
        Ok(())
    }

    /// Leaves the transaction open for the caller to end on the client later (a read
    /// call's `ROLLBACK`, sent once its answer is on its way).
    pub fn leave_open(self) {
        self.open.set(false);
    }

    pub fn rollback(self) -> Result<()> {
        self.open.set(false);
        self.client.borrow_mut().batch_execute("ROLLBACK")?;
        Ok(())
    }

    /// A statement's outcome, remembering a failure.
    fn note<T>(&self, r: std::result::Result<T, ::postgres::Error>) -> Result<T> {
        r.map_err(|e| {
            self.failed.set(true);
            Error::from(e)
        })
    }

    /// The prepared statement for `sql` with parameters of these values' types: each
    /// parameter is declared by its value (integers and flags BIGINT, text TEXT, blobs
    /// BYTEA; NULL left to PostgreSQL), as SQLite would take any value anywhere.
    fn statement(&self, sql: &str, values: &[Value]) -> Result<::postgres::Statement> {
        let mut key = String::with_capacity(sql.len() + values.len() + 1);
        key.extend(values.iter().map(|v| match v {
            Value::Null => 'n',
            Value::Int(_) | Value::Bool(_) => 'i',
            Value::Real(_) => 'r',
            Value::Text(_) => 't',
            Value::Blob(_) => 'b',
        }));
        key.push('|');
        key.push_str(sql);
        if let Some(s) = self.cache.borrow().get(&key) {
            return Ok(s.clone());
        }
        let types: Vec<Type> = values
            .iter()
            .map(|v| match v {
                Value::Null => Type::new(
                    "unspecified".into(),
                    0,
                    ::postgres::types::Kind::Pseudo,
                    "pg_catalog".into(),
                ),
                Value::Int(_) | Value::Bool(_) => Type::INT8,
                Value::Real(_) => Type::FLOAT8,
                Value::Text(_) => Type::TEXT,
                Value::Blob(_) => Type::BYTEA,
            })
            .collect();
        let translated = translate(sql);
        let stmt = if values.contains(&Value::Null) {
            self.prepare_with_nulls(&translated, types)
        } else {
            let prepared = self.client.borrow_mut().prepare_typed(&translated, &types);
            prepared.map_err(|e| prepare_error(e, &translated))
        };
        let stmt = stmt.inspect_err(|_| self.failed.set(true))?;
        #[cfg(feature = "testsuite")]
        crate::query_log::record(
            &translated,
            stmt.params().iter().map(|t| t.name().to_string()).collect(),
        );
        self.cache.borrow_mut().insert(key, stmt.clone());
        Ok(stmt)
    }

    /// Prepares a statement given NULL for some parameters: left to PostgreSQL first;
    /// where it cannot tell their type (`?1 IS NULL OR org_id = ?1`), each as text or as
    /// an integer, every combination until one prepares. Each try runs under a
    /// savepoint, so a refused one leaves the transaction usable. Once per statement and
    /// connection: the result is cached.
    fn prepare_with_nulls(&self, sql: &str, mut types: Vec<Type>) -> Result<::postgres::Statement> {
        let nulls: Vec<usize> = types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.oid() == 0)
            .map(|(i, _)| i)
            .collect();
        let mut client = self.client.borrow_mut();
        let tx = &mut **client;
        let guesses = 1u32 << nulls.len().min(6);
        let mut last = None;
        // Try 0 leaves every NULL untyped; try n types NULL i as an integer when bit i of
        // n - 1 is set, as text otherwise.
        for attempt in 0..=guesses {
            if attempt > 0 {
                for (bit, &i) in nulls.iter().enumerate() {
                    types[i] = if (attempt - 1) & (1 << bit) != 0 {
                        Type::INT8
                    } else {
                        Type::TEXT
                    };
                }
            }
            tx.batch_execute("SAVEPOINT bosun_prepare")?;
            match tx.prepare_typed(sql, &types) {
                Ok(stmt) => {
                    tx.batch_execute("RELEASE SAVEPOINT bosun_prepare")?;
                    return Ok(stmt);
                }
                Err(e) if is_type_error(e.code()) => {
                    tx.batch_execute("ROLLBACK TO SAVEPOINT bosun_prepare")?;
                    last = Some(e);
                }
                Err(e) => return Err(prepare_error(e, sql)),
            }
        }
        match last {
            Some(e) => Err(prepare_error(e, sql)),
            None => Err(no_tx()),
        }
    }

    fn run_query(&self, sql: &str, values: Vec<Value>) -> Result<Vec<::postgres::Row>> {
        let stmt = self.statement(sql, &values)?;
        let binds: Vec<Bind> = values.into_iter().map(Bind).collect();
        let refs: Vec<&(dyn PgToSql + Sync)> =
            binds.iter().map(|b| b as &(dyn PgToSql + Sync)).collect();
        let rows = self.client.borrow_mut().query(&stmt, &refs);
        self.note(rows)
    }

    fn run_execute(&self, sql: &str, values: Vec<Value>) -> Result<usize> {
        let stmt = self.statement(sql, &values)?;
        let binds: Vec<Bind> = values.into_iter().map(Bind).collect();
        let refs: Vec<&(dyn PgToSql + Sync)> =
            binds.iter().map(|b| b as &(dyn PgToSql + Sync)).collect();
        let n = self.client.borrow_mut().execute(&stmt, &refs);
        Ok(usize::try_from(self.note(n)?).unwrap_or(usize::MAX))
    }

    /// A statement to run (prepared on first use, per parameter types, and cached).
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_, 'a>> {
        Ok(Statement {
            conn: self,
            sql: sql.to_string(),
        })
    }

    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// Runs several statements (no parameters), e.g. a migration file.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        let done = self.client.borrow_mut().batch_execute(sql);
        self.note(done)
    }

    /// The id the last insert into a table with an identity column took (this session's).
    pub fn last_insert_rowid(&self) -> Result<i64> {
        self.query_row("SELECT lastval()", [], |r| r.get(0usize))
    }
}

impl Drop for Connection<'_> {
    fn drop(&mut self) {
        if self.open.get() {
            // A failed ROLLBACK leaves nothing either: the server drops the transaction
            // with the connection, which the pool then replaces.
            let _ = self.client.get_mut().batch_execute("ROLLBACK");
        }
    }
}

pub struct Statement<'c, 'a> {
    conn: &'c Connection<'a>,
    sql: String,
}

impl Statement<'_, '_> {
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        self.conn.run_execute(&self.sql, params.values())
    }

    pub fn query_row<T, P, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let rows = self.conn.run_query(&self.sql, params.values())?;
        match rows.first() {
            Some(row) => f(&Row { row }),
            None => Err(Error::QueryReturnedNoRows),
        }
    }

    pub fn query_map<T, P, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        let rows = self.conn.run_query(&self.sql, params.values())?;
        let out: Vec<Result<T>> = rows.iter().map(|row| f(&Row { row })).collect();
        Ok(out.into_iter())
    }
}

/// A statement PostgreSQL refused to prepare: the error, with the SQL it refused.
fn prepare_error(e: ::postgres::Error, sql: &str) -> Error {
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if is_retryable_code(e.code()) {
        RETRYABLE.with(|r| r.set(true));
    }
    Error::Prepare(e, sql)
}

/// SQLite's dialect as the queries are written → PostgreSQL's: `?N` placeholders become
/// `$N` (a bare `?` the next number), and `INSERT OR IGNORE` gets `ON CONFLICT DO
/// NOTHING`. Quoted text is left alone.
pub fn translate(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.chars().peekable();
    let mut next = 1;
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
            out.push(c);
        } else if c == '?' && !quoted {
            let mut digits = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(*d);
                chars.next();
            }
            if digits.is_empty() {
                digits = next.to_string();
                next += 1;
            }
            out.push('$');
            out.push_str(&digits);
        } else {
            out.push(c);
        }
    }
    const OR_IGNORE: &str = "INSERT OR IGNORE INTO";
    if let Some(at) = out.find(OR_IGNORE) {
        out.replace_range(at..at + OR_IGNORE.len(), "INSERT INTO");
        let end = out.trim_end().trim_end_matches(';').len();
        out.truncate(end);
        out.push_str(" ON CONFLICT DO NOTHING");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn outages_are_told_apart_from_other_errors() {
        use super::unavailable_code;
        let said = |code| unavailable_code(code, "m");
        assert_eq!(
            said("57P01").as_deref(),
            Some("the database is shutting down (57P01: m)")
        );
        assert!(said("57P02").unwrap().contains("shutting down"));
        assert!(said("57P03").unwrap().contains("not accepting connections"));
        assert!(said("08006").unwrap().contains("unavailable"));
        assert!(said("08001").unwrap().contains("unavailable"));
        assert!(said("53100").unwrap().contains("out of resources"));
        assert!(said("53300").unwrap().contains("out of resources"));
        assert_eq!(
            said("25006").as_deref(),
            Some("the database is read-only (25006: m)")
        );
        for code in [
            "23505", "40001", "40P01", "42P01", "57014", "25P02", "22P02",
        ] {
            assert_eq!(said(code), None, "{code}");
        }
    }

    #[test]
    fn translates_placeholders_and_or_ignore() {
        assert_eq!(
            translate("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?2"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $2"
        );
        assert_eq!(translate("SELECT ? , ?"), "SELECT $1 , $2");
        assert_eq!(
            translate("INSERT OR IGNORE INTO t (a) VALUES (?1);"),
            "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING"
        );
    }
}
