/**
 * Joins Parquet files of one schema into one Parquet file as they stream by.
 *
 * chDB's streaming query formats each block it hands over as a whole file of the format: a
 * Parquet stream is a sequence of complete files of one row group each, and their
 * concatenation is not a Parquet file. This joins them without decoding a page: a Parquet
 * file is its magic, its column chunks and then its footer, a FileMetaData in Thrift's
 * compact protocol (https://github.com/apache/parquet-format, parquet.thrift) saying where
 * each column chunk lies. Each file's bytes between its magic and its footer are passed on
 * as they are, and the row groups of its footer kept (with their file offsets moved to where
 * the bytes landed) for the one footer written at the end. What it holds is the row groups'
 * metadata: a few kilobytes per row group, whatever their size.
 */

const MAGIC = Buffer.from('PAR1', 'latin1')

/** The compact protocol's types (TCompactProtocol), as a field header's low nibble names them. */
const T = { TRUE: 1, FALSE: 2, BYTE: 3, I16: 4, I32: 5, I64: 6, DOUBLE: 7, BINARY: 8, LIST: 9, SET: 10, MAP: 11, STRUCT: 12 } as const

/**
 * What is rewritten in a struct, by field id: a file offset moved by the bytes written before
 * the file's own (`shift`), the row group's ordinal in the joined file, or a struct or list
 * of structs holding such fields. Every other field is copied byte for byte.
 */
type Rule = 'shift' | 'ordinal' | { struct: Spec } | { list: Spec }
type Spec = Readonly<Record<number, Rule>>

// ColumnMetaData: data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset.
const COLUMN_META: Spec = { 9: 'shift', 10: 'shift', 11: 'shift', 14: 'shift' }
// ColumnChunk: file_offset, meta_data, offset_index_offset, column_index_offset.
const COLUMN_CHUNK: Spec = { 2: 'shift', 3: { struct: COLUMN_META }, 4: 'shift', 6: 'shift' }
// RowGroup: columns, file_offset, ordinal.
const ROW_GROUP: Spec = { 1: { list: COLUMN_CHUNK }, 5: 'shift', 7: 'ordinal' }
// FileMetaData: num_rows, row_groups.
const NUM_ROWS = 3
const ROW_GROUPS = 4
const MAX_ORDINAL = 32767 // an i16

export class ParquetJoiner {
  /** Bytes handed out so far. */
  #written = 0
  /** The first file's FileMetaData fields but its row groups and row count: the joined file's. */
  #template: Array<{ id: number; type: number; value: Buffer }> | null = null
  #rowGroups: Buffer[] = []
  #rows = 0n

  /** The bytes to send for the next file: its column chunks (the first, after the magic). */
  add(file: Uint8Array): Buffer {
    const buf = Buffer.from(file.buffer, file.byteOffset, file.byteLength)
    if (buf.length < 12 || !buf.subarray(0, 4).equals(MAGIC) || !buf.subarray(buf.length - 4).equals(MAGIC)) throw new Error('not a Parquet file')
    const footerLength = buf.readUInt32LE(buf.length - 8)
    const footerStart = buf.length - 8 - footerLength
    if (footerStart < 4) throw new Error('a Parquet footer longer than its file')
    const head = this.#written === 0 ? MAGIC : null
    // The file's byte 4 lands here: each of its offsets moves by as much.
    const shift = BigInt(this.#written + (head ? 4 : 0) - 4)
    const fields = readStruct(new Reader(buf.subarray(footerStart, buf.length - 8)))
    for (const f of fields) {
      if (f.id === NUM_ROWS && f.type === T.I64) this.#rows += new Reader(f.value).i64()
      else if (f.id === ROW_GROUPS && f.type === T.LIST) {
        const r = new Reader(f.value)
        const { size, type } = r.listHeader()
        if (type !== T.STRUCT) throw new Error('row groups that are not structs')
        for (let i = 0; i < size; i++) {
          const w = new Writer()
          copyStruct(r, w, ROW_GROUP, { shift, ordinal: this.#rowGroups.length })
          this.#rowGroups.push(w.done())
        }
      }
    }
    this.#template ??= fields.filter((f) => f.id !== NUM_ROWS && f.id !== ROW_GROUPS)
    const body = buf.subarray(4, footerStart)
    this.#written += (head ? 4 : 0) + body.length
    return head ? Buffer.concat([head, body]) : Buffer.from(body)
  }

  /** The joined file's footer (and its magic), after the last file. */
  end(): Buffer {
    if (!this.#template) throw new Error('no Parquet file to join')
    const w = new Writer()
    const fields = [...this.#template, { id: NUM_ROWS, type: T.I64, value: null }, { id: ROW_GROUPS, type: T.LIST, value: null }].sort((a, b) => a.id - b.id)
    let last = 0
    for (const f of fields) {
      w.fieldHeader(f.id, f.type, last)
      last = f.id
      if (f.id === NUM_ROWS) w.varint(zigzag(this.#rows))
      else if (f.id === ROW_GROUPS) {
        w.listHeader(this.#rowGroups.length, T.STRUCT)
        for (const g of this.#rowGroups) w.bytes(g)
      } else w.bytes(f.value!)
    }
    w.byte(0)
    const footer = w.done()
    const tail = Buffer.alloc(8)
    tail.writeUInt32LE(footer.length, 0)
    MAGIC.copy(tail, 4)
    return Buffer.concat([footer, tail])
  }
}

class Reader {
  pos = 0
  readonly buf: Buffer
  constructor(buf: Buffer) {
    this.buf = buf
  }

  byte(): number {
    if (this.pos >= this.buf.length) throw new Error('a Parquet footer cut short')
    return this.buf[this.pos++]!
  }

  varint(): bigint {
    let value = 0n
    for (let shift = 0n; ; shift += 7n) {
      const b = this.byte()
      value |= BigInt(b & 0x7f) << shift
      if (b < 0x80) return value
      if (shift > 63n) throw new Error('a varint too long')
    }
  }

  i64(): bigint {
    const v = this.varint()
    return (v >> 1n) ^ -(v & 1n)
  }

  listHeader(): { size: number; type: number } {
    const b = this.byte()
    const size = b >> 4 === 15 ? Number(this.varint()) : b >> 4
    return { size, type: b & 0x0f }
  }

  /** Moves past one value of a compact type. */
  skip(type: number): void {
    switch (type) {
      case T.TRUE:
      case T.FALSE: // a bool in a list or map: one byte (a field's is in its header)
      case T.BYTE:
        this.pos++
        return
      case T.I16:
      case T.I32:
      case T.I64:
        this.varint()
        return
      case T.DOUBLE:
        this.pos += 8
        return
      case T.BINARY: {
        const length = Number(this.varint()) // read before pos is: the varint moves it
        this.pos += length
        return
      }
      case T.LIST:
      case T.SET: {
        const { size, type: element } = this.listHeader()
        for (let i = 0; i < size; i++) this.skip(element)
        return
      }
      case T.MAP: {
        const size = Number(this.varint())
        if (size === 0) return
        const kinds = this.byte()
        for (let i = 0; i < size; i++) {
          this.skip(kinds >> 4)
          this.skip(kinds & 0x0f)
        }
        return
      }
      case T.STRUCT:
        readStruct(this)
        return
      default:
        throw new Error(`a Thrift compact type ${type} Parquet does not use`)
    }
  }
}

class Writer {
  #chunks: number[] = []

  byte(b: number): void {
    this.#chunks.push(b)
  }

  bytes(b: Buffer): void {
    for (const x of b) this.#chunks.push(x)
  }

  varint(v: bigint): void {
    while (v >= 0x80n) {
      this.#chunks.push(Number(v & 0x7fn) | 0x80)
      v >>= 7n
    }
    this.#chunks.push(Number(v))
  }

  fieldHeader(id: number, type: number, last: number): void {
    const delta = id - last
    if (delta > 0 && delta <= 15) this.byte((delta << 4) | type)
    else {
      this.byte(type)
      this.varint(zigzag(BigInt(id)))
    }
  }

  listHeader(size: number, type: number): void {
    if (size < 15) this.byte((size << 4) | type)
    else {
      this.byte(0xf0 | type)
      this.varint(BigInt(size))
    }
  }

  done(): Buffer {
    return Buffer.from(this.#chunks)
  }
}

function zigzag(v: bigint): bigint {
  return v >= 0n ? v << 1n : ((-v) << 1n) - 1n
}

/** A struct's fields, each with the bytes of its value (a bool's value is its type). */
function readStruct(r: Reader): Array<{ id: number; type: number; value: Buffer }> {
  const fields: Array<{ id: number; type: number; value: Buffer }> = []
  let last = 0
  for (;;) {
    const header = r.byte()
    if (header === 0) return fields
    const type = header & 0x0f
    const id = header >> 4 ? last + (header >> 4) : Number(r.i64())
    last = id
    const start = r.pos
    if (type !== T.TRUE && type !== T.FALSE) r.skip(type)
    fields.push({ id, type, value: r.buf.subarray(start, r.pos) })
  }
}

/** Copies one struct from `r` to `w`, rewriting what `spec` names. */
function copyStruct(r: Reader, w: Writer, spec: Spec, at: { shift: bigint; ordinal: number }): void {
  let last = 0
  let written = 0
  for (;;) {
    const header = r.byte()
    if (header === 0) break
    const type = header & 0x0f
    const id = header >> 4 ? last + (header >> 4) : Number(r.i64())
    last = id
    const rule = spec[id]
    if (rule === 'ordinal' && type === T.I16) {
      r.i64()
      // Only encrypted files use the ordinal; past an i16 the joined file leaves it out.
      if (at.ordinal > MAX_ORDINAL) continue
      w.fieldHeader(id, type, written)
      w.varint(zigzag(BigInt(at.ordinal)))
    } else if (rule === 'shift' && type === T.I64) {
      w.fieldHeader(id, type, written)
      w.varint(zigzag(r.i64() + at.shift))
    } else if (typeof rule === 'object' && 'struct' in rule && type === T.STRUCT) {
      w.fieldHeader(id, type, written)
      copyStruct(r, w, rule.struct, at)
    } else if (typeof rule === 'object' && 'list' in rule && type === T.LIST) {
      w.fieldHeader(id, type, written)
      const list = r.listHeader()
      w.listHeader(list.size, list.type)
      for (let i = 0; i < list.size; i++) {
        if (list.type === T.STRUCT) copyStruct(r, w, rule.list, at)
        else {
          const start = r.pos
          r.skip(list.type)
          w.bytes(r.buf.subarray(start, r.pos))
        }
      }
    } else {
      w.fieldHeader(id, type, written)
      const start = r.pos
      if (type !== T.TRUE && type !== T.FALSE) r.skip(type)
      w.bytes(r.buf.subarray(start, r.pos))
    }
    written = id
  }
  w.byte(0)
}
