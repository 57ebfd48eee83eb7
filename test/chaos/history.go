package chaos

// Event is one line of an agent's (or the harness's) history file. Which
// fields are set depends on K:
//
//	pub       id, p, o            a publish acknowledged at (partition, offset)
//	pubtry    ids                 a publish about to be sent (written first)
//	puberr    ids, code           a publish whose outcome is unknown or failed
//	pubretried n, dup             an idempotent batch acknowledged after retries
//	                              (dup: its first attempt had been stored)
//	recv      g, m, p, o, e, id   a record delivered to member m in claim epoch e
//	commit    g, m, p, e, from, to, sent  a commit the database accepted
//	commiterr g, m, p, e, code    a commit rejected (PM008/PM009) or unknown
//	release   g, m, p, e
//	enq       jid, uid, poison    an enqueue acknowledged
//	enqtry    uids                an enqueue about to be sent
//	enqerr    uids, code
//	jrun      jid, tok, att, m    a job claimed (an attempt started)
//	jdone     jid, tok, m         a completion the database accepted
//	jdoneerr / jfail / jfailerr   a completion rejected, an attempt failed ...
//	kenq      jid, uid, kind      a kinds job acknowledged (kind wf, seq or lim)
//	krun      jid, tok, att, m, at  a kinds job claimed; at: its attempted_at
//	                              (the database's clock, Unix ns)
//	kdone / kdoneerr / kfail      a kinds job completed, its completion
//	                              refused or unknown, an attempt failed
//	kskip     n                   kinds batches the enqueuer skipped since
//	                              its last kskip (the backlog was above
//	                              kindsBacklog)
//	full      kind (pub, enq)     an attempt refused with PM021 (volume full)
//	maint                         a maintenance run by the leader
//	fault     kind, start, end, detail   (harness) one injected fault
type Event struct {
	K    string   `json:"k"`
	T    int64    `json:"t"`
	ID   string   `json:"id,omitempty"`
	IDs  []string `json:"ids,omitempty"`
	P    int32    `json:"p"`
	O    int64    `json:"o"`
	G    string   `json:"g,omitempty"`
	M    string   `json:"m,omitempty"`
	E    int64    `json:"e"`
	From int64    `json:"from"`
	To   int64    `json:"to"`
	Sent int64    `json:"sent,omitempty"`
	Tx   bool     `json:"tx,omitempty"`
	Code string   `json:"code,omitempty"`
	N    int      `json:"n,omitempty"`
	Dup  bool     `json:"dup,omitempty"`
	Err  string   `json:"err,omitempty"`

	JID    int64    `json:"jid,omitempty"`
	UID    string   `json:"uid,omitempty"`
	UIDs   []string `json:"uids,omitempty"`
	Poison bool     `json:"poison,omitempty"`
	Tok    int64    `json:"tok,omitempty"`
	Att    int      `json:"att,omitempty"`
	State  string   `json:"state,omitempty"`
	At     int64    `json:"at,omitempty"`

	Kind   string `json:"kind,omitempty"`
	Start  int64  `json:"start,omitempty"`
	End    int64  `json:"end,omitempty"`
	Detail string `json:"detail,omitempty"`
}
