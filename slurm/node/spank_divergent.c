/*
 * divergent's SPANK plugin: a step started with `srun --div-isolate` runs
 * each of its tasks in the network namespace and the pids cgroup that
 * divergent's prolog made for the job on this node
 * (/run/divergent/jobs/<job>/net and .../pids). Joined as root, in the task's
 * own process, before Slurm drops to the job's user: the run cannot leave
 * either. Without them (no prolog ran) the task fails: never a run on the
 * node's own network.
 *
 * `--div-container` marks a step in a pyxis container. Its command gains
 * nothing from a setuid or file-capability program (no_new_privs, as
 * bwrap's on runtime none), set in task_init, which runs after pyxis's
 * (its plugstack.conf line comes first) has started the container: enroot
 * itself is not held to it. And what the container leaves in the step's
 * cgroup when its tasks end (enroot's shell, squashfuse) is killed then
 * and waited for in steps of 10 ms: else slurmstepd's proctrack kills it
 * and sleeps a whole second before it looks again, a second every run in
 * an image would take.
 *
 * Build: gcc -shared -fPIC -O2 -o spank_divergent.so spank_divergent.c
 * Load:  plugstack.conf: required /path/to/spank_divergent.so
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(divergent, 1);

#define JOBS_DIR "/run/divergent/jobs"

static int isolate = 0;
static int container = 0;
/* The step's cgroup.procs, from its first task's /proc/<pid>/cgroup. */
static char step_procs[PATH_MAX];
static int tasks_running = -1;

static int take_isolate(int val, const char *optarg, int remote)
{
	(void) val; (void) optarg; (void) remote;
	isolate = 1;
	return 0;
}

static int take_container(int val, const char *optarg, int remote)
{
	(void) val; (void) optarg; (void) remote;
	container = 1;
	return 0;
}

struct spank_option spank_options[] = {
	{ "div-isolate", NULL,
	  "divergent: run the tasks in the job's own network and pids cgroup (made by its prolog)",
	  0, 0, take_isolate },
	{ "div-container", NULL,
	  "divergent: a step in a container: no new privileges, nothing left when it ends",
	  0, 0, take_container },
	SPANK_OPTIONS_TABLE_END
};

/* Opens a file the prolog (root) made, refusing links on the last part. */
static int open_job_file(uint32_t job, const char *name, int flags)
{
	char path[256];
	snprintf(path, sizeof path, JOBS_DIR "/%" PRIu32 "/%s", job, name);
	return open(path, flags | O_CLOEXEC | O_NOFOLLOW);
}

static int join_network(uint32_t job)
{
	int fd = open_job_file(job, "net", O_RDONLY);
	if (fd < 0) {
		slurm_error("divergent: job %u has no network of its own on this node (%s): "
			    "is divergent's prolog configured?", job, strerror(errno));
		return -1;
	}
	int rc = setns(fd, CLONE_NEWNET);
	int saved = errno;
	close(fd);
	if (rc < 0) {
		slurm_error("divergent: cannot join job %u's network: %s", job, strerror(saved));
		return -1;
	}
	return 0;
}

/* The prolog writes the folder of the job's pids cgroup to .../pids; a job
 * without one (a site that sets no limit) has no such file. */
static int join_pids_cgroup(uint32_t job)
{
	char dir[200] = "", procs[256], pid[32];
	int fd = open_job_file(job, "pids", O_RDONLY);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	ssize_t n = read(fd, dir, sizeof dir - 1);
	close(fd);
	if (n <= 0)
		return -1;
	dir[n] = '\0';
	dir[strcspn(dir, "\n")] = '\0';
	snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
	fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		slurm_error("divergent: job %u's pids cgroup %s: %s", job, dir, strerror(errno));
		return -1;
	}
	int len = snprintf(pid, sizeof pid, "%d", (int) getpid());
	int rc = write(fd, pid, len) == len ? 0 : -1;
	if (rc < 0)
		slurm_error("divergent: cannot join job %u's pids cgroup: %s", job, strerror(errno));
	close(fd);
	return rc;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	(void) ac; (void) av;
	uint32_t job;
	if (!isolate)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
		slurm_error("divergent: no job id for the task");
		return -1;
	}
	if (join_pids_cgroup(job) < 0 || join_network(job) < 0)
		return -1;
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) sp; (void) ac; (void) av;
	if (container && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		slurm_error("divergent: cannot set no_new_privs: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The path in /proc/<pid>/cgroup (pid 0: this process's) of the hierarchy
 * proctrack/cgroup tracks steps in: freezer's (cgroup v1) or else the
 * unified one (v2). */
static int cgroup_of(pid_t pid, char *out, size_t size, int *v1)
{
	char path[64], line[PATH_MAX];
	int found = -1;
	if (pid)
		snprintf(path, sizeof path, "/proc/%d/cgroup", (int) pid);
	else
		snprintf(path, sizeof path, "/proc/self/cgroup");
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f)) {	/* id:controllers:path */
		line[strcspn(line, "\n")] = '\0';
		char *controllers = strchr(line, ':');
		char *where = controllers ? strchr(controllers + 1, ':') : NULL;
		if (where == NULL)
			continue;
		*where++ = '\0';
		if (strcmp(controllers + 1, "freezer") == 0 || controllers[1] == '\0') {
			snprintf(out, size, "%s", where);
			*v1 = controllers[1] != '\0';
			found = 0;
			if (*v1)
				break;
		}
	}
	fclose(f);
	return found;
}

/* The cgroup.procs of `pid`'s step: only a cgroup inside a step of a job,
 * never slurmstepd's own. */
static int find_step_procs(pid_t pid, char *out, size_t size)
{
	char theirs[PATH_MAX - 64], mine[PATH_MAX - 64];
	int v1, my_v1;
	struct stat st;
	if (cgroup_of(pid, theirs, sizeof theirs, &v1) < 0 || cgroup_of(0, mine, sizeof mine, &my_v1) < 0)
		return -1;
	if (strcmp(theirs, mine) == 0 || !strstr(theirs, "/job_") || !strstr(theirs, "/step_"))
		return -1;
	const char *root = v1 ? "/sys/fs/cgroup/freezer" :
		stat("/sys/fs/cgroup/unified", &st) == 0 ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
	snprintf(out, size, "%s%s/cgroup.procs", root, theirs);
	return 0;
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	(void) ac; (void) av;
	pid_t pid;
	if (!container || step_procs[0] || spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS)
		return 0;
	if (find_step_procs(pid, step_procs, sizeof step_procs) < 0)
		step_procs[0] = '\0';
	return 0;
}

/* Kills what is in the step's cgroup but slurmstepd; how many there were. */
static int kill_the_rest(void)
{
	FILE *f = fopen(step_procs, "re");
	if (f == NULL)
		return 0;
	int pid, n = 0;
	while (fscanf(f, "%d", &pid) == 1)
		if (pid > 1 && pid != (int) getpid()) {
			kill(pid, SIGKILL);
			n++;
		}
	fclose(f);
	return n;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void) ac; (void) av;
	uint32_t count;
	if (!container || !step_procs[0])
		return 0;
	if (tasks_running < 0)
		tasks_running = spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &count) == ESPANK_SUCCESS
			? (int) count : 1;
	if (--tasks_running > 0)
		return 0;
	for (int i = 0; i < 300 && kill_the_rest() > 0; i++)
		usleep(10000);
	return 0;
}
