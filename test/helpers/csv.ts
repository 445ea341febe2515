/**
 * RFC 4180 CSV, as a test reads it back: fields separated by commas, records by a newline,
 * a quoted field may hold commas, newlines and doubled quotes. An empty field that is not
 * quoted is null (ClickHouse writes NULL so with format_csv_null_representation = ''), a
 * quoted one the empty string.
 */
export function parseCsv(text: string): Array<Array<string | null>> {
  const records: Array<Array<string | null>> = []
  let record: Array<string | null> = []
  let i = 0
  while (i < text.length) {
    let field: string | null
    if (text[i] === '"') {
      let value = ''
      i++
      for (;;) {
        const quote = text.indexOf('"', i)
        if (quote < 0) throw new Error('an unterminated quoted CSV field')
        value += text.slice(i, quote)
        if (text[quote + 1] === '"') {
          value += '"'
          i = quote + 2
          continue
        }
        i = quote + 1
        break
      }
      field = value
    } else {
      let end = i
      while (end < text.length && text[end] !== ',' && text[end] !== '\n') end++
      const raw = text.slice(i, end)
      if (raw.includes('"') || raw.includes('\r')) throw new Error(`a bare CSV field with a quote or CR: ${raw}`)
      field = raw === '' ? null : raw
      i = end
    }
    record.push(field)
    if (text[i] === ',') {
      i++
      continue
    }
    if (text[i] === '\n' || i >= text.length) {
      records.push(record)
      record = []
      i++
      continue
    }
    throw new Error(`unexpected ${JSON.stringify(text[i])} after a CSV field at ${i}`)
  }
  return records
}
