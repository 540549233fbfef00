//! A BM25 retriever over a tantivy index of the corpus, built on first use in an index folder and
//! reopened afterwards while the corpus is unchanged.
//!
//! Each passage's `contents` (title and text together, as pyserini indexes it for Search-R1's BM25
//! baseline) is indexed, analysed with lowercasing, ASCII folding, English stop-word removal and
//! English stemming, and stored byte for byte beside the id to build the hits.
//!
//! Equal scores rank in corpus order, whatever the build: tantivy breaks ties by document id, and
//! the index is built as one segment sorted by each passage's line number in the corpus, so
//! document ids follow the corpus (with several indexing threads they would otherwise depend on
//! which thread took which passage).
//!
//! The folder holds the tantivy files, a marker file naming it a drmas BM25 index (so that a
//! rebuild only ever deletes a folder this module created), a lock file held while the index is
//! checked or built (so that processes sharing the folder build it once), and the corpus
//! [`Fingerprint`], written last: a folder without a matching fingerprint is rebuilt.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tantivy::collector::TopDocs;
use tantivy::indexer::NoMergePolicy;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, FAST, STORED,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    StopWordFilter, TextAnalyzer,
};
use tantivy::{
    doc, Index, IndexReader, IndexSettings, IndexSortByField, Order, ReloadPolicy, TantivyDocument,
    Term,
};

use super::fingerprint::{FileStamp, Fingerprint};
use super::index_folder::IndexFolder;
use super::query::{counted_terms, QueryLimits};
use super::{Hit, Retriever, RetrieverError};
use crate::corpus::{CorpusReader, Passage};

/// Bump when the schema or the analyzer changes, so that existing indexes are rebuilt.
const LAYOUT: u32 = 3;
/// The analyzer's name in the index's tokenizer manager.
const ANALYZER: &str = "drmas_en";
/// The file holding the fingerprint of the corpus the index was built from.
const FINGERPRINT_FILE: &str = "corpus-fingerprint.json";
/// The fast field holding each passage's position in the corpus.
const POSITION_FIELD: &str = "position";
/// Tokens longer than this many bytes are dropped (URLs, base64 and the like).
const MAX_TOKEN_BYTES: usize = 40;

/// How to build an index.
#[derive(Debug, Clone)]
pub struct Bm25Options {
    /// Report progress every this many passages while indexing.
    pub progress_every: usize,
    /// Indexing threads.
    pub threads: usize,
    /// Indexing memory budget per thread, in bytes (tantivy requires at least 15 MB).
    pub memory_per_thread: usize,
}

impl Default for Bm25Options {
    fn default() -> Bm25Options {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Bm25Options {
            progress_every: 100_000,
            threads: cores.min(4),
            memory_per_thread: 64 << 20,
        }
    }
}

/// The index fields.
#[derive(Debug, Clone, Copy)]
struct Fields {
    /// The passage id, stored.
    id: Field,
    /// The passage `contents`, indexed and stored.
    contents: Field,
    /// The passage's position in the corpus (0-based), the order the index is sorted in.
    position: Field,
}

impl Fields {
    fn schema() -> (Schema, Fields) {
        let mut builder = Schema::builder();
        let contents_options = TextOptions::default()
            .set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(ANALYZER)
                    .set_index_option(IndexRecordOption::WithFreqs),
            )
            .set_stored();
        let fields = Fields {
            id: builder.add_text_field("id", STORED),
            contents: builder.add_text_field("contents", contents_options),
            position: builder.add_u64_field(POSITION_FIELD, FAST),
        };
        (builder.build(), fields)
    }

    fn of(schema: &Schema) -> Result<Fields, String> {
        let field = |name| schema.get_field(name).map_err(|error| error.to_string());
        Ok(Fields {
            id: field("id")?,
            contents: field("contents")?,
            position: field(POSITION_FIELD)?,
        })
    }
}

/// The analyzer for indexed text and queries.
fn analyzer() -> Result<TextAnalyzer, String> {
    let stop_words = StopWordFilter::new(Language::English)
        .ok_or("tantivy has no English stop words (feature `stopwords`)")?;
    Ok(TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(stop_words)
        .filter(Stemmer::new(Language::English))
        .build())
}

/// A batch is split over threads only when each gets at least this many queries.
const MIN_QUERIES_PER_THREAD: usize = 16;

/// A BM25 retriever over an on-disk tantivy index.
pub struct Bm25Retriever {
    dir: PathBuf,
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    search_threads: usize,
    limits: QueryLimits,
}

impl Bm25Retriever {
    /// Opens the index of `corpus` in `index_dir`, building it first when the folder has no index
    /// or one built from another corpus (or an older layout). Progress goes to `progress`.
    ///
    /// `index_dir` is created if needed; an existing folder that is neither empty nor a drmas
    /// BM25 index is refused rather than overwritten. While another process (or thread) checks
    /// or builds the same folder, this one waits for it, then reuses its index.
    pub fn open_or_build(
        corpus: &Path,
        index_dir: &Path,
        options: &Bm25Options,
        progress: &dyn Fn(&str),
    ) -> Result<Bm25Retriever, RetrieverError> {
        let index_error = |reason: String| RetrieverError::Index {
            dir: index_dir.to_owned(),
            reason,
        };
        let corpus_io = |source| crate::corpus::CorpusError::Io {
            path: corpus.to_owned(),
            source,
        };
        let stamp = FileStamp::of(corpus).map_err(corpus_io)?;
        let folder = IndexFolder::lock(index_dir, progress).map_err(index_error)?;
        let fingerprint_path = index_dir.join(FINGERPRINT_FILE);
        if let Some(stored) = Fingerprint::load(&fingerprint_path).filter(|f| f.layout == LAYOUT) {
            let fresh = if stored.stamp_matches(stamp) {
                true
            } else if stored.size == stamp.size {
                progress(&format!(
                    "corpus {} was touched; checking its content",
                    corpus.display()
                ));
                let current = Fingerprint::compute(corpus, LAYOUT).map_err(corpus_io)?;
                let same = current.hash == stored.hash;
                if same {
                    current.save(&fingerprint_path).map_err(|e| {
                        index_error(format!("cannot write {FINGERPRINT_FILE}: {e}"))
                    })?;
                }
                same
            } else {
                false
            };
            if fresh {
                let retriever = Bm25Retriever::open_checked(index_dir)?;
                progress(&format!(
                    "reusing BM25 index {} ({} passages)",
                    index_dir.display(),
                    retriever.num_docs()
                ));
                return Ok(retriever);
            }
        }
        Bm25Retriever::build_in(&folder, corpus, options, progress)
    }

    /// Opens the index in `index_dir`, which the caller holds locked and has checked against
    /// its corpus.
    fn open_checked(index_dir: &Path) -> Result<Bm25Retriever, RetrieverError> {
        let index_error = |reason: String| RetrieverError::Index {
            dir: index_dir.to_owned(),
            reason,
        };
        let index = Index::open_in_dir(index_dir).map_err(|e| index_error(e.to_string()))?;
        Bm25Retriever::from_index(index_dir, index).map_err(index_error)
    }

    fn from_index(dir: &Path, index: Index) -> Result<Bm25Retriever, String> {
        let analyzer = analyzer()?;
        index.tokenizers().register(ANALYZER, analyzer.clone());
        let fields = Fields::of(&index.schema())?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| e.to_string())?;
        let search_threads = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Bm25Retriever {
            dir: dir.to_owned(),
            reader,
            fields,
            analyzer,
            search_threads,
            limits: QueryLimits::default(),
        })
    }

    /// Builds the index of `corpus` in `index_dir` from scratch (once another builder of the
    /// folder, if any, is done).
    pub fn build(
        corpus: &Path,
        index_dir: &Path,
        options: &Bm25Options,
        progress: &dyn Fn(&str),
    ) -> Result<Bm25Retriever, RetrieverError> {
        let folder =
            IndexFolder::lock(index_dir, progress).map_err(|reason| RetrieverError::Index {
                dir: index_dir.to_owned(),
                reason,
            })?;
        Bm25Retriever::build_in(&folder, corpus, options, progress)
    }

    /// [`Bm25Retriever::build`] in `folder`, locked.
    fn build_in(
        folder: &IndexFolder,
        corpus: &Path,
        options: &Bm25Options,
        progress: &dyn Fn(&str),
    ) -> Result<Bm25Retriever, RetrieverError> {
        let index_dir = folder.dir();
        let index_error = |reason: String| RetrieverError::Index {
            dir: index_dir.to_owned(),
            reason,
        };
        let corpus_io = |source| crate::corpus::CorpusError::Io {
            path: corpus.to_owned(),
            source,
        };
        let started = Instant::now();
        // Fingerprint before reading: a corpus edited during the build is then seen as changed.
        let fingerprint = Fingerprint::compute(corpus, LAYOUT).map_err(corpus_io)?;
        folder.clear().map_err(index_error)?;
        progress(&format!(
            "building BM25 index of {} in {}",
            corpus.display(),
            index_dir.display()
        ));

        let (schema, fields) = Fields::schema();
        let settings = IndexSettings {
            sort_by_field: Some(IndexSortByField {
                field: POSITION_FIELD.to_owned(),
                order: Order::Asc,
            }),
            ..IndexSettings::default()
        };
        let index = Index::builder()
            .schema(schema)
            .settings(settings)
            .create_in_dir(index_dir)
            .map_err(|e| index_error(e.to_string()))?;
        index
            .tokenizers()
            .register(ANALYZER, analyzer().map_err(index_error)?);
        let threads = options.threads.max(1);
        let mut writer = index
            .writer_with_num_threads::<TantivyDocument>(
                threads,
                threads * options.memory_per_thread,
            )
            .map_err(|e| index_error(e.to_string()))?;
        // One merge of everything at the end instead of merges along the way.
        writer.set_merge_policy(Box::new(NoMergePolicy));
        let mut count = 0usize;
        for passage in CorpusReader::open(corpus)? {
            let Passage { id, contents } = passage?;
            writer
                .add_document(doc!(
                    fields.id => id,
                    fields.contents => contents,
                    fields.position => count as u64,
                ))
                .map_err(|e| index_error(e.to_string()))?;
            count += 1;
            if options.progress_every > 0 && count.is_multiple_of(options.progress_every) {
                progress(&format!("indexed {count} passages"));
            }
        }
        writer.commit().map_err(|e| index_error(e.to_string()))?;
        let segments = index
            .searchable_segment_ids()
            .map_err(|e| index_error(e.to_string()))?;
        if segments.len() > 1 {
            writer
                .merge(&segments)
                .wait()
                .map_err(|e| index_error(format!("merging the segments: {e}")))?;
        }
        writer
            .wait_merging_threads()
            .map_err(|e| index_error(e.to_string()))?;
        fingerprint
            .save(&index_dir.join(FINGERPRINT_FILE))
            .map_err(|e| index_error(format!("cannot write {FINGERPRINT_FILE}: {e}")))?;
        progress(&format!(
            "indexed {count} passages in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        let index = Index::open_in_dir(index_dir).map_err(|e| index_error(e.to_string()))?;
        Bm25Retriever::from_index(index_dir, index).map_err(index_error)
    }

    /// Uses up to `threads` threads for a batch of queries (default: the available cores).
    pub fn with_search_threads(mut self, threads: usize) -> Bm25Retriever {
        self.search_threads = threads.max(1);
        self
    }

    /// Refuses queries over `limits` (default [`QueryLimits::default`]) with
    /// [`RetrieverError::QueryTooLarge`] or [`RetrieverError::BatchTooLarge`], before searching
    /// any of them.
    pub fn with_query_limits(mut self, limits: QueryLimits) -> Bm25Retriever {
        self.limits = limits;
        self
    }

    /// The number of indexed passages.
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The index folder.
    pub fn index_dir(&self) -> &Path {
        &self.dir
    }

    /// The `top_k` best passages for one query, or [`RetrieverError::QueryTooLarge`] for a
    /// query over the [`QueryLimits`].
    pub fn search_one(&self, query: &str, top_k: usize) -> Result<Vec<Hit>, RetrieverError> {
        let query = self.query(0, query)?;
        self.search_query(query.as_ref(), top_k)
    }

    /// The BM25 query for `text`, the query at `position` in its batch: a disjunction of its
    /// distinct terms, each weighted by how often it occurs (as pyserini weights repeated query
    /// words); `None` when no term is left (only stop words, say).
    fn query(&self, position: usize, text: &str) -> Result<Option<BooleanQuery>, RetrieverError> {
        let terms = counted_terms(&mut self.analyzer.clone(), text, self.limits)
            .map_err(|reason| RetrieverError::QueryTooLarge { position, reason })?;
        if terms.is_empty() {
            return Ok(None);
        }
        let clauses = terms
            .into_iter()
            .map(|(text, count)| {
                let term = TermQuery::new(
                    Term::from_field_text(self.fields.contents, &text),
                    IndexRecordOption::WithFreqs,
                );
                let clause: Box<dyn Query> = if count == 1 {
                    Box::new(term)
                } else {
                    Box::new(BoostQuery::new(Box::new(term), count as f32))
                };
                (Occur::Should, clause)
            })
            .collect();
        Ok(Some(BooleanQuery::new(clauses)))
    }

    /// The `top_k` best passages for a query (none for `None`).
    fn search_query(
        &self,
        query: Option<&BooleanQuery>,
        top_k: usize,
    ) -> Result<Vec<Hit>, RetrieverError> {
        if top_k == 0 {
            return Err(RetrieverError::ZeroTopK);
        }
        let Some(query) = query else {
            return Ok(Vec::new());
        };
        let index_error = |reason: String| RetrieverError::Index {
            dir: self.dir.clone(),
            reason,
        };
        let searcher = self.reader.searcher();
        // No search finds more passages than the index holds: a larger `top_k` would only size
        // the collector's buffer by it.
        let limit = top_k.min(usize::try_from(searcher.num_docs()).unwrap_or(usize::MAX));
        let top = searcher
            .search(query, &TopDocs::with_limit(limit.max(1)).order_by_score())
            .map_err(|e| index_error(e.to_string()))?;
        top.into_iter()
            .map(|(score, address)| {
                let document: TantivyDocument = searcher
                    .doc(address)
                    .map_err(|e| index_error(e.to_string()))?;
                let field = |field| {
                    document
                        .get_first(field)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_owned()
                };
                let passage = Passage::new(field(self.fields.id), field(self.fields.contents));
                Ok(Hit::new(passage, score))
            })
            .collect()
    }
}

impl Retriever for Bm25Retriever {
    /// Checks every query, and the batch, against the [`QueryLimits`] first, then searches a large
    /// batch on several threads (see [`Bm25Retriever::with_search_threads`]).
    fn search(&self, queries: &[String], top_k: usize) -> Result<Vec<Vec<Hit>>, RetrieverError> {
        let mut batch_terms = 0usize;
        let queries = queries
            .iter()
            .enumerate()
            .map(|(position, text)| {
                let query = self.query(position, text)?;
                batch_terms += query.as_ref().map_or(0, |q| q.clauses().len());
                if batch_terms > self.limits.max_batch_terms {
                    return Err(RetrieverError::BatchTooLarge {
                        limit: self.limits.max_batch_terms,
                    });
                }
                Ok(query)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let threads = self
            .search_threads
            .min(queries.len() / MIN_QUERIES_PER_THREAD)
            .max(1);
        let search_all = |chunk: &[Option<BooleanQuery>]| -> Result<Vec<Vec<Hit>>, RetrieverError> {
            chunk
                .iter()
                .map(|query| self.search_query(query.as_ref(), top_k))
                .collect()
        };
        if threads == 1 {
            return search_all(&queries);
        }
        let chunk_size = queries.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let workers: Vec<_> = queries
                .chunks(chunk_size)
                .map(|chunk| scope.spawn(move || search_all(chunk)))
                .collect();
            let mut results = Vec::with_capacity(queries.len());
            for worker in workers {
                let chunk = worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                results.extend(chunk?);
            }
            Ok(results)
        })
    }
}
