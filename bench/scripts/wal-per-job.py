# WAL written per job by `pgmsg bench queue` (128 workers): diffs pg_stat_wal
# around seconds 2-10 of a run and divides by the jobs the bench counted.
# Usage: URL=postgres://... python3 bench/scripts/wal-per-job.py BINARY [BINARY...]
# (each a pgmsg binary, e.g. built from two commits). Needs psql.
import subprocess, time, re, sys
import os
U=os.environ.get('URL', 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable')
def wal():
    o=subprocess.check_output(['psql',U,'-Atc',"select wal_records, wal_fpi, wal_bytes from pg_stat_wal"]).decode().strip().split('|')
    return [float(x) for x in o]
for b in sys.argv[1:]:
    p=subprocess.Popen([b,'--database-url',U,'--schema','pgmsg_bench','bench','queue','--workers','128','--jobs','300000','--duration','12s'],stdout=subprocess.PIPE,stderr=subprocess.STDOUT,text=True)
    lines=[]
    t0=None
    for line in p.stdout:
        lines.append(line)
        m=re.match(r'pgmsg +(\d+)s +jobs +([\d.]+)(k?)/s',line)
        if m and int(m.group(1))==2 and t0 is None:
            a=wal(); t0=time.time()
        if m and t0 is not None and int(m.group(1))==10:
            z=wal(); break
    done=0
    for line in lines:
        m=re.match(r'pgmsg +(\d+)s +jobs +([\d.]+)(k?)/s',line)
        if m and 3<=int(m.group(1))<=10:
            done+=float(m.group(2))*(1000 if m.group(3) else 1)
    p.wait()
    d=[z[i]-a[i] for i in range(3)]
    print(b, 'jobs', int(done), 'WAL records/job %.1f FPI/job %.3f bytes/job %.0f' % (d[0]/done, d[1]/done, d[2]/done))
