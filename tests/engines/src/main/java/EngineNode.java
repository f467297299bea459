/*
 * One Elasticsearch 7, OpenSearch 2 or OpenSearch 3 node in this JVM, for
 * treelockfs's tests.
 *
 * Compiled with javac against the JDK alone: the engine is reached through
 * reflection, so the same class serves every engine (their APIs differ in the
 * package prefix, org.elasticsearch or org.opensearch, and in a few names
 * tried in turn below) and needs no build tool beyond javac.
 * tests/engines/start is the only caller.
 *
 *   java EngineNode ports N
 *       prints N distinct free loopback TCP ports, one per line.
 *   java EngineNode run ENGINE --home DIR --ready FILE --health QUERY
 *                       [--parent PID] [key=value ...]
 *       starts a node with settings key=value (a value holding a comma is a
 *       list), waits until GET /_cluster/health?QUERY answers 200 on the node's
 *       http.port, then writes that port to FILE (atomically).  The node is
 *       closed on SIGTERM, and when process PID (the launcher) is gone.
 */

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.net.HttpURLConnection;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

public final class EngineNode {
	/* The modules the es lock store needs: HTTP (netty4), Painless (update
	 * and stored scripts), reindex (_delete_by_query).  Each is the first of
	 * its names that the class path has (OpenSearch 3 renamed them). */
	private static final String[][] MODULES = {
		{"transport.Netty4Plugin", "transport.Netty4ModulePlugin"},
		{"painless.PainlessPlugin", "painless.PainlessModulePlugin"},
		{"index.reindex.ReindexPlugin", "index.reindex.ReindexModulePlugin"},
	};

	private static void die(String msg) {
		System.err.println("EngineNode: " + msg);
		System.exit(2);
	}

	public static void main(String[] args) throws Exception {
		if (args.length == 2 && args[0].equals("ports")) {
			ports(Integer.parseInt(args[1]));
			return;
		}
		if (args.length < 2 || !args[0].equals("run"))
			die("usage: EngineNode ports N | run ENGINE --home DIR --ready FILE --health QUERY [--parent PID] [key=value ...]");
		String engine = args[1];
		String prefix;
		String nodeClass;
		if (engine.equals("opensearch") || engine.equals("opensearch3")) {
			prefix = "org.opensearch.";
			nodeClass = "org.codelibs.opensearch.runner.node.OpenSearchRunnerNode";
		} else if (engine.equals("elasticsearch")) {
			prefix = "org.elasticsearch.";
			nodeClass = "org.codelibs.elasticsearch.runner.node.ClusterRunnerNode";
		} else {
			die("unknown engine " + engine);
			return;
		}
		Path home = null, ready = null;
		String health = "wait_for_status=yellow";
		long parent = -1;
		Map<String, String> settings = new LinkedHashMap<>();
		for (int i = 2; i < args.length; i++) {
			String a = args[i];
			if (a.startsWith("--") && i + 1 < args.length) {
				String v = args[++i];
				switch (a) {
				case "--home": home = Paths.get(v).toAbsolutePath(); break;
				case "--ready": ready = Paths.get(v).toAbsolutePath(); break;
				case "--health": health = v; break;
				case "--parent": parent = Long.parseLong(v); break;
				default: die("unknown option " + a);
				}
			} else if (a.indexOf('=') > 0) {
				settings.put(a.substring(0, a.indexOf('=')), a.substring(a.indexOf('=') + 1));
			} else {
				die("bad argument " + a);
			}
		}
		if (home == null || ready == null)
			die("--home and --ready are required");
		for (String d : new String[] {"config", "modules", "plugins", "data", "logs"})
			Files.createDirectories(home.resolve(d));
		settings.putIfAbsent("path.home", home.toString());
		settings.putIfAbsent("path.data", home.resolve("data").toString());
		settings.putIfAbsent("path.logs", home.resolve("logs").toString());
		String httpPort = settings.get("http.port");
		if (httpPort == null || !httpPort.matches("[0-9]+"))
			die("http.port=N is required");

		Object node = start(prefix, nodeClass, settings);
		final Object n = node;
		Runtime.getRuntime().addShutdownHook(new Thread(() -> close(n), "engine-close"));
		if (parent > 0)
			watchParent(parent);

		/* the node's own address (network.host), loopback by default */
		String host = settings.getOrDefault("network.host", "127.0.0.1");
		String url = "http://" + host + ":" + httpPort + "/_cluster/health?" + health + "&timeout=5s";
		for (;;) {
			if (healthy(url))
				break;
			Thread.sleep(200);
		}
		Path tmp = ready.resolveSibling(ready.getFileName() + ".tmp");
		Files.write(tmp, (httpPort + "\n").getBytes(StandardCharsets.US_ASCII));
		Files.move(tmp, ready, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
		System.out.println("EngineNode: ready on http port " + httpPort);
		/* The node's threads are daemons: hold the JVM until SIGTERM (the
		 * shutdown hook closes the node). */
		new java.util.concurrent.CountDownLatch(1).await();
	}

	private static void ports(int n) throws IOException {
		List<ServerSocket> held = new ArrayList<>();
		InetAddress lo = InetAddress.getByName("127.0.0.1");
		try {
			for (int i = 0; i < n; i++)
				held.add(new ServerSocket(0, 1, lo));
			for (ServerSocket s : held)
				System.out.println(s.getLocalPort());
		} finally {
			for (ServerSocket s : held)
				s.close();
		}
	}

	private static Object start(String prefix, String nodeClass, Map<String, String> settings) throws Exception {
		Class<?> settingsC = Class.forName(prefix + "common.settings.Settings");
		Object b = settingsC.getMethod("builder").invoke(null);
		Method put = b.getClass().getMethod("put", String.class, String.class);
		Method putList = b.getClass().getMethod("putList", String.class, String[].class);
		for (Map.Entry<String, String> e : settings.entrySet()) {
			if (e.getValue().indexOf(',') >= 0)
				putList.invoke(b, e.getKey(), (Object) e.getValue().split(","));
			else
				put.invoke(b, e.getKey(), e.getValue());
		}
		Object s = b.getClass().getMethod("build").invoke(b);

		Class<?> envC = Class.forName(prefix + "env.Environment");
		Object env = envC.getConstructor(settingsC, Path.class).newInstance(s, null);

		/* Logging at INFO to stdout, which the launcher sends to node-K.log. */
		Path conf = (Path) method(envC, "configFile", "configDir").invoke(env);
		Files.write(conf.resolve("log4j2.properties"), String.join("\n",
			"status = error",
			"appender.console.type = Console",
			"appender.console.name = console",
			"appender.console.layout.type = PatternLayout",
			"appender.console.layout.pattern = [%d{ISO8601}][%-5p][%c{1.}] %m%n",
			"rootLogger.level = info",
			"rootLogger.appenderRef.console.ref = console",
			"").getBytes(StandardCharsets.UTF_8));
		Class<?> logConf = Class.forName(prefix + "common.logging.LogConfigurator");
		logConf.getMethod("configure", envC).invoke(null, env);

		List<Class<?>> plugins = new ArrayList<>();
		for (String[] names : MODULES)
			plugins.add(firstClass(prefix, names));
		Constructor<?> nc = Class.forName(nodeClass).getConstructor(envC, java.util.Collection.class);
		Object node = nc.newInstance(env, plugins);
		node.getClass().getMethod("start").invoke(node);
		return node;
	}

	private static Class<?> firstClass(String prefix, String[] names) throws ClassNotFoundException {
		for (String n : names) {
			try {
				return Class.forName(prefix + n);
			} catch (ClassNotFoundException e) {
				/* the next name */
			}
		}
		throw new ClassNotFoundException(prefix + String.join(" or " + prefix, names));
	}

	private static Method method(Class<?> c, String... names) throws NoSuchMethodException {
		for (String n : names) {
			try {
				return c.getMethod(n);
			} catch (NoSuchMethodException e) {
				/* the next name */
			}
		}
		throw new NoSuchMethodException(c.getName() + "." + String.join(" or ", names));
	}

	private static volatile boolean closing;

	private static void close(Object node) {
		if (closing)
			return;
		closing = true;
		try {
			node.getClass().getMethod("close").invoke(node);
			Method await = node.getClass().getMethod("awaitClose", long.class, TimeUnit.class);
			await.invoke(node, 20L, TimeUnit.SECONDS);
		} catch (Throwable t) {
			System.err.println("EngineNode: close: " + t);
		}
	}

	/* The launcher stops the node on SIGTERM; should the launcher itself be
	 * killed hard, this ends the JVM so no node outlives it. */
	private static void watchParent(long pid) {
		Thread t = new Thread(() -> {
			for (;;) {
				Optional<ProcessHandle> p = ProcessHandle.of(pid);
				if (p.isEmpty() || !p.get().isAlive()) {
					System.err.println("EngineNode: launcher " + pid + " is gone, stopping");
					System.exit(0);
				}
				try {
					Thread.sleep(1000);
				} catch (InterruptedException e) {
					return;
				}
			}
		}, "engine-parent-watch");
		t.setDaemon(true);
		t.start();
	}

	private static boolean healthy(String url) {
		try {
			HttpURLConnection c = (HttpURLConnection) new URL(url).openConnection();
			c.setConnectTimeout(2000);
			c.setReadTimeout(10000);
			int code = c.getResponseCode();
			try (InputStream in = code < 400 ? c.getInputStream() : c.getErrorStream()) {
				if (in != null)
					in.readAllBytes();
			}
			return code == 200;
		} catch (IOException e) {
			return false;
		}
	}
}
