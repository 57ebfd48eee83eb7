// Every error the SQL API raises has SQLSTATE class PM; PgmsgError carries
// that code, its stable name (as the Go library's sentinels and the HTTP
// API name it) and the server's message. docs/sql-api.md lists them.

export const CODES: Readonly<Record<string, string>> = {
  PM001: "unknown_topic",
  PM002: "topic_exists",
  PM003: "invalid_name",
  PM004: "invalid_argument",
  PM005: "partition_out_of_range",
  PM006: "record_too_large",
  PM007: "unknown_group",
  PM008: "claim_expired",
  PM009: "claim_not_held",
  PM010: "empty_batch",
  PM011: "invalid_offset",
  PM012: "not_assigned",
  PM013: "not_member",
  PM014: "backpressure",
  PM015: "out_of_order_sequence",
  PM017: "topic_not_empty",
  PM101: "unknown_queue",
  PM102: "queue_exists",
  PM103: "payload_too_large",
  PM104: "invalid_delay",
  PM105: "invalid_max_attempts",
  PM106: "job_not_held",
  PM107: "unknown_job",
  PM108: "queue_not_empty",
  PM109: "queue_full",
  PM110: "job_not_waiting",
  PM111: "unknown_periodic_job",
  PM112: "invalid_schedule",
  PM113: "limit_key_missing",
  PM114: "unknown_dependency",
  PM115: "dependency_queue",
  PM116: "dependency_cycle",
  PM117: "too_many_dependencies",
  PM118: "invalid_tenant",
  PM119: "invalid_tenant_weight",
  PM122: "invalid_step_name",
  PM123: "step_too_large",
  PM120: "invalid_batch_callback",
  PM121: "unknown_batch",
  PM124: "not_enough_replicas",
  PMA01: "unknown_token",
  PMA02: "invalid_token",
  PMA03: "token_exists",
};

export class PgmsgError extends Error {
  /** The SQLSTATE, PM001 ... */
  readonly code: string;
  /** The code's stable name, unknown_topic ... */
  readonly codeName: string;
  /** The server's message. */
  readonly serverMessage: string;

  constructor(code: string, message: string, cause?: unknown) {
    const codeName = CODES[code] ?? "unknown";
    super(`${code} ${codeName}: ${message}`, { cause });
    this.name = "PgmsgError";
    this.code = code;
    this.codeName = codeName;
    this.serverMessage = message;
  }
}

/** The PgmsgError for an error pgmsg raised, else the error itself. */
export function translate(err: unknown): unknown {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === "string" && code.startsWith("PM")) {
    return new PgmsgError(code, (err as Error).message, err);
  }
  return err;
}
