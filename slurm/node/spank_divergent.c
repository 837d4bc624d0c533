/*
 * divergent's SPANK plugin: a step started with `srun --div-isolate` runs
 * each of its tasks in the network namespace and the pids cgroup that
 * divergent's prolog made for the job on this node
 * (/run/divergent/jobs/<job>/net and .../pids). Joined as root, in the task's
 * own process, before Slurm drops to the job's user: the run cannot leave
 * either. Without them (no prolog ran) the task fails: never a run on the
 * node's own network. With `--div-no-new-privs` too, the task's command
 * gains nothing from a setuid or file-capability program (as bwrap's
 * runs on runtime none): set in task_init, which runs after pyxis's (its
 * plugstack.conf line comes first) has started the container, so enroot
 * itself is not held to it.
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
#include <sys/prctl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(divergent, 1);

#define JOBS_DIR "/run/divergent/jobs"

static int isolate = 0;
static int no_new_privs = 0;

static int take_isolate(int val, const char *optarg, int remote)
{
	(void) val; (void) optarg; (void) remote;
	isolate = 1;
	return 0;
}

static int take_no_new_privs(int val, const char *optarg, int remote)
{
	(void) val; (void) optarg; (void) remote;
	no_new_privs = 1;
	return 0;
}

struct spank_option spank_options[] = {
	{ "div-isolate", NULL,
	  "divergent: run the tasks in the job's own network and pids cgroup (made by its prolog)",
	  0, 0, take_isolate },
	{ "div-no-new-privs", NULL,
	  "divergent: the tasks' commands gain no privilege from setuid programs",
	  0, 0, take_no_new_privs },
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
	if (no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		slurm_error("divergent: cannot set no_new_privs: %s", strerror(errno));
		return -1;
	}
	return 0;
}
