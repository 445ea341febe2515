/**
 * CSV as RFC 4180 writes it: a cell with a comma, a quote or a line break is quoted, its quotes
 * doubled; each row ends with CRLF. A cell a spreadsheet would run as a formula (one that
 * starts with =, +, -, @, a tab or a carriage return, where it is not a number) is prefixed
 * with a single quote, as OWASP advises for CSV that people open in a spreadsheet: agents
 * write the metadata these cells hold.
 */
export function csvRow(cells: ReadonlyArray<string | null>): string {
  return `${cells.map(csvCell).join(',')}\r\n`
}

const FORMULA = /^[=+\-@\t\r]/
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/

function csvCell(value: string | null): string {
  if (value === null) return ''
  const text = FORMULA.test(value) && !NUMBER.test(value) ? `'${value}` : value
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text
}
